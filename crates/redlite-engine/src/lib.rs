//! Generation: sampling, stop conditions, the decode loop
