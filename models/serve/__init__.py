"""`hecate serve`: an OpenAI-style HTTP server for a trained run, with continuous batching.

- `streams`: incremental decoding of streams that join and leave, each at its own position;
- `sampling`: greedy, temperature and nucleus (top-p) choice of the next byte;
- `jobs` and `batcher`: one completion in the decode loop, and the loop itself;
- `protocol`: request validation and the OpenAI response shapes (no web framework needed);
- `app` and `server`: the FastAPI routes and the uvicorn process (the ``serve`` extra:
  ``pip install -e ".[serve]"``); `page.html` is the web page served at ``/``;
- `command`: the ``hecate serve`` command line.

Only `app` and `server` import FastAPI / uvicorn, so the rest works without the extra.
"""
