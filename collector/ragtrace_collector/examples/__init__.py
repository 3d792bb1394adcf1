"""Example applications traced with ragtrace (see ``examples/rag_app``)."""
