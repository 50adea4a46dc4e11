//! The CUDA driver layer: probing for the libraries, one context and stream
//! per device, the kernels compiled by NVRTC (cached on disk), device
//! buffers, copies and launches. Everything above this module speaks in
//! device pointers and kernel names.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};

use crate::CudaError;

/// Whether the CUDA driver library can be loaded (cudarc panics on first use
/// when it cannot, so nothing touches cudarc before this says yes).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library by its known names.
    unsafe { sys::is_culib_present() }
}

/// Whether NVRTC can be loaded. Besides the loader's search path, NVRTC is
/// looked for in `REDLITE_NVRTC_DIR` and the CUDA toolkit's usual places
/// (`$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`); one found there is loaded
/// by full path so that the by-name lookup finds it.
pub fn nvrtc_present() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: only tries to dlopen the library by its known names.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return true;
        }
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(d) = std::env::var_os("REDLITE_NVRTC_DIR") {
            dirs.push(d.into());
        }
        if let Some(d) = std::env::var_os("CUDA_HOME") {
            dirs.push(PathBuf::from(d).join("lib64"));
        }
        dirs.push("/usr/local/cuda/lib64".into());
        for d in dirs {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            let mut names: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libnvrtc") && n.contains(".so"))
                })
                .collect();
            // The builtins first: libnvrtc loads them by name.
            names.sort_by_key(|p| !p.to_string_lossy().contains("builtins"));
            for p in names {
                // SAFETY: loading NVRTC runs only its initialisers; the handle
                // is leaked so the library stays loaded for cudarc.
                if let Ok(l) = unsafe { libloading::Library::new(&p) } {
                    std::mem::forget(l);
                }
            }
            // SAFETY: as above.
            if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
                return true;
            }
        }
        false
    })
}

/// Number of CUDA devices (0 when there is no driver).
pub fn device_count() -> usize {
    if !driver_present() {
        return 0;
    }
    CudaContext::device_count()
        .map(|n| n.max(0) as usize)
        .unwrap_or(0)
}

fn drv(what: &str) -> impl Fn(result::DriverError) -> CudaError + '_ {
    move |e| CudaError::Driver(format!("{what}: {e:?}"))
}

/// A device allocation, freed on drop.
pub struct DevBuf {
    pub ptr: u64,
    pub bytes: usize,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for DevBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevBuf({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // Frees must see a bound context; errors at drop cannot be reported.
            let _ = self.ctx.bind_to_thread();
            // SAFETY: `ptr` came from `malloc_sync` and is freed once.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// A kernel argument: device pointers and sizes as 64-bit, ints and floats.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    U(u64),
    I(i32),
    F(f32),
    D(f64),
}

/// One CUDA device with its context, stream and compiled kernels.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: sys::CUstream,
    pub ordinal: usize,
    pub name: String,
    pub cc: (i32, i32),
    pub total_mem: usize,
    funcs: HashMap<String, sys::CUfunction>,
    _module: sys::CUmodule,
}

// SAFETY: the stream, module and functions are driver handles usable from any
// thread once the context is bound (every entry point binds it first); the
// model serialises its use of the stream.
unsafe impl Send for Gpu {}
// SAFETY: as above.
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Open device `ordinal`, compile (or load from the disk cache) the
    /// kernels in `source` for its architecture and look up `kernels`.
    pub fn open(ordinal: usize, source: &str, kernels: &[String]) -> Result<Gpu, CudaError> {
        if !driver_present() {
            return Err(CudaError::NoDriver);
        }
        let n = device_count();
        if ordinal >= n {
            return Err(CudaError::NoDevice { ordinal, count: n });
        }
        let ctx = CudaContext::new(ordinal).map_err(drv("creating the context"))?;
        // SAFETY: this crate orders all work on one stream itself.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(drv("device name"))?;
        let cc = ctx
            .compute_capability()
            .map_err(drv("compute capability"))?;
        let total_mem = ctx.total_mem().map_err(drv("device memory"))?;
        ctx.bind_to_thread().map_err(drv("binding the context"))?;
        let stream = {
            let mut s = std::mem::MaybeUninit::uninit();
            // SAFETY: creates a stream in the bound context.
            unsafe {
                sys::cuStreamCreate(
                    s.as_mut_ptr(),
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                )
                .result()
                .map_err(drv("creating a stream"))?;
                s.assume_init()
            }
        };
        let image = compile_cached(source, cc)?;
        ctx.bind_to_thread().map_err(drv("binding the context"))?;
        // SAFETY: `image` is a NUL-terminated PTX or a cubin for this device.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(drv("loading the kernels"))?;
        let mut funcs = HashMap::new();
        for k in kernels {
            let cname = CString::new(k.as_str())
                .map_err(|_| CudaError::Driver(format!("kernel name {k:?}")))?;
            // SAFETY: `module` is loaded and alive for the Gpu's lifetime.
            let f = unsafe { result::module::get_function(module, cname) }
                .map_err(|e| CudaError::Driver(format!("kernel {k}: {e:?}")))?;
            funcs.insert(k.clone(), f);
        }
        Ok(Gpu {
            ctx,
            stream,
            ordinal,
            name,
            cc,
            total_mem,
            funcs,
            _module: module,
        })
    }

    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(drv("binding the context"))
    }

    /// `bytes` of uninitialised device memory (at least 256-byte aligned).
    pub fn alloc(&self, bytes: usize) -> Result<DevBuf, CudaError> {
        self.bind()?;
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: plain device allocation in the bound context.
            unsafe { result::malloc_sync(bytes) }.map_err(|e| CudaError::OutOfMemory {
                bytes,
                msg: format!("{e:?}"),
            })?
        };
        Ok(DevBuf {
            ptr,
            bytes,
            ctx: self.ctx.clone(),
        })
    }

    /// `bytes` of zeroed device memory.
    pub fn zeros(&self, bytes: usize) -> Result<DevBuf, CudaError> {
        let b = self.alloc(bytes)?;
        self.memset0(b.ptr, bytes)?;
        Ok(b)
    }

    /// A device copy of `data` (synchronous).
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<DevBuf, CudaError> {
        let bytes = std::mem::size_of_val(data);
        let b = self.alloc(bytes)?;
        self.htod(b.ptr, data)?;
        Ok(b)
    }

    /// Host → device, ordered on the stream and finished on return.
    pub fn htod<T: Copy>(&self, dst: u64, src: &[T]) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst` holds at least `src`'s bytes (callers size it); the
        // copy completes before the host slice can go away (synchronised).
        unsafe {
            result::memcpy_htod_async(dst, src, self.stream).map_err(drv("host to device copy"))?;
        }
        self.sync()
    }

    /// Device → host, after all work queued before it.
    pub fn dtoh<T: Copy>(&self, dst: &mut [T], src: u64) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `src` holds at least `dst`'s bytes; synchronised below.
        unsafe {
            result::memcpy_dtoh_async(dst, src, self.stream).map_err(drv("device to host copy"))?;
        }
        self.sync()
    }

    /// Device → device, queued on the stream.
    pub fn dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are device allocations of at least `bytes`.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(drv("device copy"))
    }

    pub fn memset0(&self, dst: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: `dst` is a device allocation of at least `bytes`.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream) }.map_err(drv("memset"))
    }

    pub fn sync(&self) -> Result<(), CudaError> {
        // SAFETY: the stream belongs to this context.
        unsafe { result::stream::synchronize(self.stream) }.map_err(drv("running the kernels"))
    }

    /// Queue kernel `name` on the stream.
    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        let f = *self
            .funcs
            .get(name)
            .ok_or_else(|| CudaError::Driver(format!("no kernel named {name}")))?;
        let mut slots = [0u64; 32];
        if args.len() > slots.len() {
            return Err(CudaError::Driver(format!("{name}: too many arguments")));
        }
        for (s, a) in slots.iter_mut().zip(args) {
            *s = match *a {
                Arg::U(v) => v,
                Arg::I(v) => v as u32 as u64,
                Arg::F(v) => v.to_bits() as u64,
                Arg::D(v) => v.to_bits(),
            };
        }
        let mut ptrs: Vec<*mut c_void> = slots[..args.len()]
            .iter_mut()
            .map(|s| s as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: each pointer addresses an 8-byte slot holding the argument
        // in its low bytes (little-endian), as the kernel's parameter types
        // expect; the slots outlive the call.
        unsafe {
            result::launch_kernel(f, grid, (block, 1, 1), smem, self.stream, &mut ptrs)
                .map_err(|e| CudaError::Driver(format!("launching {name}: {e:?}")))
        }
    }
}

/// The on-disk kernel cache: `REDLITE_CUDA_CACHE`, else
/// `$XDG_CACHE_HOME/redlite/cuda`, else `~/.cache/redlite/cuda`.
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("REDLITE_CUDA_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("redlite/cuda"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/redlite/cuda"))
}

/// FNV-1a, stable across builds (the cache key).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The NVRTC options every kernel is compiled with.
pub fn nvrtc_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "-default-device".into(),
        "-diag-suppress=177".into(),
    ]
}

/// Compile `source` for compute capability `cc` to a cubin (NUL-terminated
/// PTX when the NVRTC cannot emit a cubin for it), reusing a cached image.
pub fn compile_cached(source: &str, cc: (i32, i32)) -> Result<Vec<u8>, CudaError> {
    let arch = format!("sm_{}{}", cc.0, cc.1);
    let (maj, min) = nvrtc_version()?;
    let opts = nvrtc_options(&arch);
    let key = fnv1a(&[
        source.as_bytes(),
        arch.as_bytes(),
        opts.join(" ").as_bytes(),
        format!("{maj}.{min}").as_bytes(),
    ]);
    let path = cache_dir().map(|d| d.join(format!("{key:016x}-{arch}.cubin")));
    if let Some(p) = &path {
        if let Ok(bytes) = std::fs::read(p) {
            tracing::debug!("kernels from the cache {}", p.display());
            return Ok(bytes);
        }
    }
    let t0 = std::time::Instant::now();
    let image = compile(source, &opts)?;
    tracing::info!(
        "compiled the CUDA kernels for {arch} in {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    );
    if let Some(p) = &path {
        // A cache that cannot be written only costs a recompile next time.
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &image).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(image)
}

pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    if !nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut a, &mut b) }
        .result()
        .map_err(|e| CudaError::Compile(format!("nvrtcVersion: {e:?}")))?;
    Ok((a, b))
}

/// NVRTC: `source` with `opts` to a cubin (or PTX if no cubin is produced).
pub fn compile(source: &str, opts: &[String]) -> Result<Vec<u8>, CudaError> {
    use cudarc::nvrtc::{result as nr, sys as ns};
    if !nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let src = CString::new(source).map_err(|_| CudaError::Compile("NUL in source".into()))?;
    let name = CString::new("redlite.cu").map_err(|_| CudaError::Compile("name".into()))?;
    let prog = nr::create_program(&src, Some(&name))
        .map_err(|e| CudaError::Compile(format!("nvrtcCreateProgram: {e:?}")))?;
    // SAFETY: `prog` is a live program until destroyed at the end.
    let out = unsafe {
        let res = nr::compile_program(prog, opts);
        let log = nr::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        match res {
            Err(e) => Err(CudaError::Compile(format!(
                "{e:?} ({}):\n{log}",
                opts.join(" ")
            ))),
            Ok(()) => {
                let mut size = 0usize;
                let cubin = if ns::nvrtcGetCUBINSize(prog, &mut size).result().is_ok() && size > 0 {
                    let mut buf = vec![0u8; size];
                    ns::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char)
                        .result()
                        .ok()
                        .map(|_| buf)
                } else {
                    None
                };
                match cubin {
                    Some(b) => Ok(b),
                    None => nr::get_ptx(prog)
                        .map(|p| p.iter().map(|&c| c as u8).collect())
                        .map_err(|e| CudaError::Compile(format!("nvrtcGetPTX: {e:?}"))),
                }
            }
        }
    };
    // SAFETY: destroyed once.
    let _ = unsafe { nr::destroy_program(prog) };
    out
}
