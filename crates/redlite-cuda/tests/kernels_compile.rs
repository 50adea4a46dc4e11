//! The whole kernel source (dequantizers + forward kernels) compiles under
//! NVRTC for every architecture Red Lite targets: Ampere (sm_80, sm_86),
//! Ada (sm_89) and Hopper (sm_90), with every kernel the forward pass
//! launches present. Needs only NVRTC (no GPU): set `REDLITE_NVRTC_DIR` to a
//! directory holding `libnvrtc.so.*` (CI installs the `nvidia-cuda-nvrtc`
//! package); without NVRTC the test says so and passes only when
//! `REDLITE_REQUIRE_NVRTC` is unset.

#[test]
fn kernels_compile_for_every_target() {
    let dirs: Vec<std::path::PathBuf> = std::env::var_os("REDLITE_NVRTC_DIR")
        .map(Into::into)
        .into_iter()
        .collect();
    if !redlite_cuda::gpu::find_nvrtc(&dirs) {
        assert!(
            std::env::var_os("REDLITE_REQUIRE_NVRTC").is_none(),
            "REDLITE_REQUIRE_NVRTC is set but NVRTC could not be loaded (REDLITE_NVRTC_DIR={:?})",
            std::env::var_os("REDLITE_NVRTC_DIR")
        );
        eprintln!("NVRTC not found: skipping (set REDLITE_NVRTC_DIR)");
        return;
    }
    let src = redlite_cuda::kernel_source();
    // REDLITE_KERNEL_ARCHS=sm_90,...: only these; with REDLITE_CUDA_CACHE set the
    // images are also stored in that kernel cache (to carry to a GPU machine).
    let archs: Vec<String> = match std::env::var("REDLITE_KERNEL_ARCHS") {
        Ok(v) => v.split(',').map(|a| a.trim().to_string()).collect(),
        Err(_) => ["sm_80", "sm_86", "sm_89", "sm_90"]
            .map(String::from)
            .to_vec(),
    };
    let store = std::env::var_os("REDLITE_CUDA_CACHE").map(std::path::PathBuf::from);
    for arch in archs.iter().map(String::as_str) {
        let t0 = std::time::Instant::now();
        let img = redlite_cuda::gpu::compile(&src, &redlite_cuda::gpu::nvrtc_options(arch))
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        // A cubin is an ELF image; every kernel the forward launches is in it.
        assert_eq!(&img[..4], b"\x7fELF", "{arch}: NVRTC gave no cubin");
        let text = String::from_utf8_lossy(&img);
        for k in redlite_cuda::kernel_names() {
            assert!(text.contains(k.as_str()), "{arch}: kernel {k} missing");
        }
        if let Some(dir) = &store {
            let p = redlite_cuda::gpu::cache_path(dir, &src, arch)
                .unwrap_or_else(|e| panic!("{arch}: {e}"));
            redlite_cuda::gpu::store_cached(&p, &img);
        }
        eprintln!(
            "{arch}: {} KiB cubin in {:.1} s",
            img.len() / 1024,
            t0.elapsed().as_secs_f64()
        );
    }
}
