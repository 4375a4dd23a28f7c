"""Type stubs for the Rust core, checked against the binary with mypy.stubtest."""

__version__: str
