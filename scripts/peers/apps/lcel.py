"""The LCEL RAG chain the LangChain peer apps share (oi_langchain, tl_langchain, openlit_langchain): an in-memory
vector store retriever (top 3, hashed embeddings: no download), the prompt, ChatOpenAI against the scripted server,
a string parser. Only the instrumentation differs between the apps; the chain is built after it is turned on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common import CORPUS, MODEL, SYSTEM, TEMPLATE, embed
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI


class HashedEmbeddings(Embeddings):
    """A fake embedding model (no download): the scripted server's hashed bag of words."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return embed([text])[0]


def rag_chains(base_url: str) -> Callable[[bool], Any]:
    """``chain_for(stream)``: the RAG chain, its model streaming (with usage) or not."""
    store = InMemoryVectorStore(HashedEmbeddings())
    store.add_documents(
        [Document(page_content=text, id=doc_id, metadata={"source": doc_id}) for doc_id, text in CORPUS]
    )
    retriever = store.as_retriever(search_kwargs={"k": 3})
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", TEMPLATE)])

    def chain_for(stream: bool) -> Any:
        llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="k", streaming=stream, stream_usage=True)
        context = retriever | (lambda docs: "\n".join(d.page_content for d in docs))
        return {"context": context, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()

    return chain_for
