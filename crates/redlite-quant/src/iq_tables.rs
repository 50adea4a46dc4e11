//! Grid and sign tables of the IQ types (from ggml-common.h).
