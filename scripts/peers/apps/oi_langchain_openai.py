"""OpenInference LangChain and OpenInference OpenAI together: the same chain, the client instrumented twice."""

from __future__ import annotations

from oi_langchain import main

if __name__ == "__main__":
    main("oi_langchain_openai", with_openai=True)
