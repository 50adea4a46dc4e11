//! Byte-level BPE from GGUF, chat templates, tool-call parsing
