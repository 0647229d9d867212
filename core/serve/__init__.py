"""The cluster as an HTTP API (OpenAI's, with Anthropic's and Ollama's where they fit),
served by the controller over a running ``core.run.session.Session``: never by the ranks.

Pure parts, each small and unit-tested: ``errors`` (OpenAI's error shape), ``requests``
(a request body → an ``Ask``, or a 4xx), ``shaping`` (answers as OpenAI objects and SSE
chunks), ``keys`` (API keys, stored hashed, 0600), ``queue`` (in-order, bounded). The
moving parts: ``answers`` (the queue served one answer at a time over the session's
events), ``app`` (the Starlette routes) and ``server`` (uvicorn in a thread, stopped
cleanly).
"""
