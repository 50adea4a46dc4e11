fn main() {
    let p = std::env::args().nth(1).expect("path");
    let f = redlite_gguf::GgufFile::open(&p).unwrap_or_else(|e| panic!("{e}"));
    for (k, v) in &f.metadata {
        println!("{k} = {v}");
    }
    for t in &f.tensors {
        println!("{} {:?} {} {}", t.name, t.dims, t.ggml_type, t.n_bytes);
    }
}
