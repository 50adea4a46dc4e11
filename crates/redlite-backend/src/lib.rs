//! Backend interface and the CPU backend
