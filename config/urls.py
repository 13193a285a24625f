"""URL wiring: the landing page, the admin console, the chat and the API under /api/v1/."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_safe
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from cognition.ops.health import healthz, readyz
from cognition.ops.metrics import metrics

# The admin speaks of the product; "View site" opens the landing page with the chat and the docs.
admin.site.site_header = "Motor Cortex"
admin.site.site_title = "Motor Cortex admin"
admin.site.index_title = "Console"
admin.site.site_url = "/"
# The home page lists every model; without the sidebar a list table has the width it needs at
# 1280 px (with it, the runs and policies lists hid their last columns).
admin.site.enable_nav_sidebar = False


# Browsers ask every site for /favicon.ico; without an answer each page logs a failed load.
FAVICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect width="16" height="16" rx="3" fill="#417690"/>'
    '<text x="8" y="12" font-family="sans-serif" font-size="10" font-weight="bold" '
    'text-anchor="middle" fill="#f5dd5d">M</text></svg>\n'
)


@require_safe
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponse(FAVICON_SVG, content_type="image/svg+xml")


urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("favicon.ico", favicon, name="favicon"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/", include("cognition.api.urls")),
    path("chat/", include("cognition.brain.urls")),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
