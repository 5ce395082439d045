"""The web face: the read-only HTTP API, its offline docs, and the dashboard at ``/``.

Needs the ``server`` extra (FastAPI, uvicorn, fastapi-offline); nothing outside this package
imports a web framework, so the worker SDK and the archiver install without one.
"""

from archiver.web.app import create_app

__all__ = ["create_app"]
