"""broker"""
from broker import native as _native

_native.install()  # before any compiled module is imported: compiled or source (broker.native)
