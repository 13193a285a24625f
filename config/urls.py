"""URL wiring: the landing page, the admin console, the chat and the API under /api/v1/."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

# The admin speaks of the product; "View site" opens the landing page with the chat and the docs.
admin.site.site_header = "Motor Cortex"
admin.site.site_title = "Motor Cortex admin"
admin.site.index_title = "Console"
admin.site.site_url = "/"
# The home page lists every model; without the sidebar a list table has the width it needs at
# 1280 px (with it, the runs and policies lists hid their last columns).
admin.site.enable_nav_sidebar = False


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", TemplateView.as_view(template_name="home.html"), name="home"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/", include("cognition.api.urls")),
    path("chat/", include("cognition.brain.urls")),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
