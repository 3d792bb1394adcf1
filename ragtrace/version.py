"""The one place the version is written: both distributions (``ragtrace``, ``ragtrace-collector``) read it."""

__version__ = "0.2.0"
