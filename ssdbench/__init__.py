"""ssdbench: benchmark autoregressive, speculative and speculative speculative decoding."""

__version__ = "0.1.0"
