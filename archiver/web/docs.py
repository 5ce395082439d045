"""``/redoc`` without the internet: fastapi-offline's bundled Redoc, served with the one asset it
would still fetch from a CDN (the Redocly logo in the sidebar) replaced by an inline image."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse, Response

BUNDLE = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
CDN_LOGO = b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'
INLINE_LOGO = b"src:\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E\""
SCRIPT_URL = "/static/redoc/redoc.standalone.js"


def add_offline_redoc(app: FastAPI, favicon_url: str) -> None:
    bundle = BUNDLE.read_bytes().replace(CDN_LOGO, INLINE_LOGO)

    @app.get(SCRIPT_URL, include_in_schema=False)
    def redoc_script() -> Response:
        return Response(bundle, media_type="application/javascript", headers={"Cache-Control": "max-age=86400"})

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - ReDoc",
            redoc_js_url=SCRIPT_URL,
            redoc_favicon_url=favicon_url,
            with_google_fonts=False,
        )
