"""One module per dashboard section; each exposes ``router`` (see :mod:`aifab.web.nav`)."""
