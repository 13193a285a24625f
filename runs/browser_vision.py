"""The browser's vision check: after an element could not be located twice, a screenshot of the
page goes to a vision-capable model (LLM_VISION_MODEL, OpenAI-compatible image input) asked
where the target is, before the model tries a third time.

What the vision model answers is about web content: it reaches the model inside the action's
result, which is marked untrusted like the page itself. The screenshot paints every password and
credential-filled field over (sandbox/inside/browser_host.py), so no secret reaches the vision
model either. Without LLM_VISION_MODEL the check is reported as unavailable, as data.
"""

from __future__ import annotations

import base64
from pathlib import Path

from django.conf import settings

#: the most characters of the vision model's answer kept in the result
ANSWER_CHARS = 600


def vision_model() -> str:
    return str(getattr(settings, "LLM_VISION_MODEL", "") or "")


def vision_locate(*, workspace: str, screenshot: str, target: str) -> str:
    """Ask the vision model where `target` is on the screenshot at `screenshot` (a path inside
    the sandbox, under /workspace); its answer, or why there is none (never raises)."""
    from runs.llm import llm_client

    model = vision_model()
    if not model:
        return "no vision model is configured (LLM_VISION_MODEL)"
    relative = screenshot.removeprefix("/workspace/")
    try:
        image = (Path(workspace) / relative).read_bytes()
    except OSError as exc:
        return f"the screenshot could not be read: {exc.strerror or exc}"
    prompt = (
        "This is a screenshot of a web page. Where is the element described as "
        f"{target!r}? Answer with its visible label, its position on the page and what is "
        "near it; say so if it is not there."
    )
    try:
        reply = llm_client().chat.completions.create(
            model=model,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": prompt},
                        {
                            "type": "image_url",
                            "image_url": {
                                "url": "data:image/png;base64," + base64.b64encode(image).decode()
                            },
                        },
                    ],
                }
            ],
        )
    except Exception as exc:  # noqa: BLE001 - the check is advice; its failure is data
        return f"the vision model failed: {type(exc).__name__}"
    answer = (reply.choices[0].message.content or "").strip() if reply.choices else ""
    return answer[:ANSWER_CHARS] or "the vision model gave no answer"
