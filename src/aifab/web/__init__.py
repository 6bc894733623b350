"""The web dashboard: server-rendered pages over every layer, under ``/ui`` of ``aifab serve``.

Pages are thin callers of the same service functions as the HTTP API and the CLI; they never
query the metadata DB themselves. Signing in with an API key gives a signed session cookie; the
key's role decides what a page shows and which forms it accepts (see :mod:`aifab.web.auth`).
The gateway mounts :data:`aifab.web.routes.router` by name, as it mounts its own routers.
"""
