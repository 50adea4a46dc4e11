//! The CUDA driver layer: probing for the libraries, one context and stream
//! per device, the kernels compiled by NVRTC (cached on disk), device
//! buffers, copies and launches. Everything above this module speaks in
//! device pointers and kernel names.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};

use crate::CudaError;

/// Whether the CUDA driver library can be loaded (cudarc panics on first use
/// when it cannot, so nothing touches cudarc before this says yes).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library by its known names.
    unsafe { sys::is_culib_present() }
}

/// How [`Gpu::open`] finds NVRTC, where it keeps the compiled kernels and
/// whether it times them. The caller fills it (the command line reads its
/// documented environment variables); nothing here reads the environment.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// The on-disk kernel cache ([`cache_path`]); `None` compiles the
    /// kernels at every open.
    pub kernel_cache: Option<PathBuf>,
    /// Directories to look for `libnvrtc.so.*` in (see [`find_nvrtc`]).
    pub nvrtc_dirs: Vec<PathBuf>,
    /// Time every launch with events ([`Gpu::profile_take`]); decode then
    /// launches kernel by kernel instead of replaying its graph.
    pub profile: bool,
}

/// Whether NVRTC can be loaded from the loader's search path (or was loaded
/// before by [`find_nvrtc`]).
pub fn nvrtc_present() -> bool {
    find_nvrtc(&[])
}

/// Whether NVRTC can be loaded. Besides the loader's search path, NVRTC is
/// looked for in `dirs`, then in `/usr/local/cuda/lib64`; one found there is
/// loaded by full path (and stays loaded) so that the by-name lookup finds
/// it.
pub fn find_nvrtc(dirs: &[PathBuf]) -> bool {
    // One search at a time (each may load libraries).
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: only tries to dlopen the library by its known names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return true;
    }
    let toolkit = PathBuf::from("/usr/local/cuda/lib64");
    for d in dirs.iter().chain(std::iter::once(&toolkit)) {
        let Ok(rd) = std::fs::read_dir(d) else {
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

/// Pinned host memory mapped into the device's address space (the kernels
/// read it over the bus), freed on drop.
pub struct HostBuf {
    host: *mut u8,
    /// The device's address of the same bytes.
    pub dev: u64,
    pub bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is plain memory owned by this value; the raw pointer is
// only written through `&mut self`.
unsafe impl Send for HostBuf {}
// SAFETY: as above (shared access only reads).
unsafe impl Sync for HostBuf {}

impl HostBuf {
    /// The bytes, to fill from the host.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `host` points to `bytes` bytes allocated by cuMemHostAlloc
        // and owned by `self`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.host, self.bytes) }
    }
}

impl std::fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBuf({:#x}, {} bytes)", self.dev, self.bytes)
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: `host` came from `malloc_host` and is freed once.
        let _ = unsafe { result::free_host(self.host as *mut std::ffi::c_void) };
    }
}

/// The most arguments one launch takes (8-byte slots each).
const MAX_ARGS: usize = 40;

/// A kernel argument: device pointers and sizes as 64-bit, ints and floats.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    U(u64),
    I(i32),
    F(f32),
    D(f64),
}

/// A kernel ready to launch (its name kept for errors and profiles).
#[derive(Clone, Copy, Debug)]
pub struct Func {
    f: sys::CUfunction,
    pub name: &'static str,
    /// The byte size of each of its parameters, as the driver reports them
    /// (`None` where the driver cannot: before CUDA 12.4); every launch's
    /// arguments are checked against them ([`check_args`]).
    params: Option<Params>,
}

/// A kernel's parameter sizes in bytes, in order (`n` of them).
#[derive(Clone, Copy, Debug)]
struct Params {
    n: usize,
    sizes: [u8; MAX_ARGS],
}

/// The parameter sizes of `f` from the driver (`cuFuncGetParamInfo`, which
/// drivers of CUDA 12.4 and later have; `driver` is the driver's version),
/// or `None`.
fn param_sizes(f: sys::CUfunction, driver: i32) -> Option<Params> {
    if driver < 12040 {
        return None;
    }
    let mut p = Params {
        n: 0,
        sizes: [0; MAX_ARGS],
    };
    for i in 0..=MAX_ARGS {
        let (mut off, mut size) = (0usize, 0usize);
        // SAFETY: `f` is a loaded function; the two outputs are plain
        // integers on the stack. An index past the last parameter is an
        // error return, not undefined behaviour.
        let r = unsafe { sys::cuFuncGetParamInfo(f, i, &mut off, &mut size) };
        match r {
            sys::CUresult::CUDA_SUCCESS => {}
            // Past the last parameter (a kernel without any, or another
            // error: unchecked).
            sys::CUresult::CUDA_ERROR_INVALID_VALUE if i > 0 => {
                p.n = i;
                return Some(p);
            }
            _ => return None,
        }
        // More parameters than a launch can pass, or one of a size no
        // `Arg` has: leave the kernel unchecked (no launch can match it).
        *p.sizes.get_mut(i)? = u8::try_from(size).ok()?;
    }
    None
}

/// `args` against `func`'s parameters: as many, each of the parameter's
/// size (a wrong count or size would hand the kernel garbage).
fn check_args(func: &Func, args: &[Arg]) -> Result<(), CudaError> {
    let Some(p) = &func.params else {
        return Ok(());
    };
    if args.len() != p.n {
        return Err(CudaError::Driver(format!(
            "{}: launched with {} arguments, the kernel takes {}",
            func.name,
            args.len(),
            p.n
        )));
    }
    for (i, (a, &want)) in args.iter().zip(&p.sizes).enumerate() {
        let have = match a {
            Arg::U(_) | Arg::D(_) => 8,
            Arg::I(_) | Arg::F(_) => 4,
        };
        if have != want {
            return Err(CudaError::Driver(format!(
                "{}: argument {i} is {have} bytes, the kernel's parameter {want}",
                func.name
            )));
        }
    }
    Ok(())
}

// SAFETY: a function handle is a plain driver handle, valid in its context.
unsafe impl Send for Func {}
// SAFETY: as above.
unsafe impl Sync for Func {}

/// Per-kernel GPU time, collected when profiling ([`GpuOptions::profile`]).
#[derive(Default)]
struct Prof {
    pending: Vec<(&'static str, sys::CUevent, sys::CUevent)>,
    totals: std::collections::BTreeMap<&'static str, (f64, u64)>,
}

/// A captured CUDA graph, ready to replay on the stream.
pub struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: graph handles are driver handles used under the model's lock.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created once by `end_capture`, destroyed once.
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.exec);
            let _ = sys::cuGraphDestroy(self.graph);
        }
    }
}

/// One CUDA device with its context, stream and compiled kernels.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: sys::CUstream,
    pub ordinal: usize,
    pub name: String,
    pub cc: (i32, i32),
    pub total_mem: usize,
    /// Streaming multiprocessors.
    pub sm_count: usize,
    funcs: HashMap<String, Func>,
    _module: sys::CUmodule,
    prof: Option<std::sync::Mutex<Prof>>,
    /// Programmatic dependent launch (sm_90 and later), granted where the
    /// caller asks for it.
    pdl_ok: bool,
    /// Whether launches now go out with programmatic stream serialization:
    /// each kernel may start while the one before it finishes, and waits
    /// for it inside (`RL_PDL_WAIT` in `common.cuh`).
    pdl: std::sync::atomic::AtomicBool,
    /// Kernels launched so far ([`Gpu::launches`]).
    launched: std::sync::atomic::AtomicU64,
    /// A second stream for work that runs beside the main one (the expert
    /// prefetch of a decode step), forked from and joined back to it by the
    /// two events below (which a graph capture turns into edges).
    side: [sys::CUstream; 2],
    ev_fork: sys::CUevent,
    ev_join: sys::CUevent,
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
    pub fn open(
        ordinal: usize,
        source: &str,
        kernels: &[String],
        opts: &GpuOptions,
    ) -> Result<Gpu, CudaError> {
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
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv("multiprocessor count"))?
            .max(1) as usize;
        ctx.bind_to_thread().map_err(drv("binding the context"))?;
        let new_stream = || -> Result<sys::CUstream, CudaError> {
            let mut s = std::mem::MaybeUninit::uninit();
            // SAFETY: creates a stream in the bound context.
            unsafe {
                sys::cuStreamCreate(
                    s.as_mut_ptr(),
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                )
                .result()
                .map_err(drv("creating a stream"))?;
                Ok(s.assume_init())
            }
        };
        let stream = new_stream()?;
        let side = [new_stream()?, new_stream()?];
        let event = || -> Result<sys::CUevent, CudaError> {
            let mut e = std::mem::MaybeUninit::uninit();
            // SAFETY: creates an event in the bound context.
            unsafe {
                sys::cuEventCreate(
                    e.as_mut_ptr(),
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                )
                .result()
                .map_err(drv("creating an event"))?;
                Ok(e.assume_init())
            }
        };
        let (ev_fork, ev_join) = (event()?, event()?);
        if !find_nvrtc(&opts.nvrtc_dirs) {
            return Err(CudaError::NoNvrtc);
        }
        let image = compile_cached(source, cc, opts.kernel_cache.as_deref())?;
        ctx.bind_to_thread().map_err(drv("binding the context"))?;
        // SAFETY: `image` is a NUL-terminated PTX or a cubin for this device.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(drv("loading the kernels"))?;
        let mut driver = 0i32;
        // SAFETY: writes one integer; on failure it stays 0 (no checks).
        unsafe {
            let _ = sys::cuDriverGetVersion(&mut driver);
        }
        let mut funcs = HashMap::new();
        for k in kernels {
            let cname = CString::new(k.as_str())
                .map_err(|_| CudaError::Driver(format!("kernel name {k:?}")))?;
            // SAFETY: `module` is loaded and alive for the Gpu's lifetime.
            let f = unsafe { result::module::get_function(module, cname) }
                .map_err(|e| CudaError::Driver(format!("kernel {k}: {e:?}")))?;
            let name: &'static str = Box::leak(k.clone().into_boxed_str());
            let params = param_sizes(f, driver);
            funcs.insert(k.clone(), Func { f, name, params });
        }
        let prof = opts.profile.then(|| std::sync::Mutex::new(Prof::default()));
        Ok(Gpu {
            ctx,
            stream,
            ordinal,
            name,
            cc,
            total_mem,
            sm_count,
            funcs,
            _module: module,
            prof,
            pdl_ok: cc.0 >= 9,
            pdl: std::sync::atomic::AtomicBool::new(false),
            launched: std::sync::atomic::AtomicU64::new(0),
            side,
            ev_fork,
            ev_join,
        })
    }

    /// Let side stream `p` (0 or 1) start the work queued on it from now on
    /// once everything queued on the main stream so far is done.
    pub fn fork_side(&self, p: usize) -> Result<(), CudaError> {
        let side = self.side[p & 1];
        // SAFETY: both streams and the event belong to this context; an
        // event may be recorded again once waited on (the wait takes the
        // work recorded at the time of the wait call).
        unsafe {
            sys::cuEventRecord(self.ev_fork, self.stream)
                .result()
                .map_err(drv("recording the fork event"))?;
            sys::cuStreamWaitEvent(side, self.ev_fork, 0)
                .result()
                .map_err(drv("forking the side stream"))
        }
    }

    /// Make the main stream wait for everything queued on side stream `p`
    /// so far.
    pub fn join_side(&self, p: usize) -> Result<(), CudaError> {
        // SAFETY: as in `fork_side`.
        unsafe {
            sys::cuEventRecord(self.ev_join, self.side[p & 1])
                .result()
                .map_err(drv("recording the join event"))?;
            sys::cuStreamWaitEvent(self.stream, self.ev_join, 0)
                .result()
                .map_err(drv("joining the side stream"))
        }
    }

    /// Queue kernel `f` on side stream `p` (no programmatic dependent
    /// launch, not timed by the profiler).
    pub fn launch_side(
        &self,
        p: usize,
        func: Func,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        check_args(&func, args)?;
        self.count_launch();
        let mut slots = [0u64; MAX_ARGS];
        if args.len() > slots.len() {
            return Err(CudaError::Driver(format!(
                "{}: too many arguments",
                func.name
            )));
        }
        let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        arg_slots(args, &mut slots, &mut ptrs);
        // SAFETY: as for the plain launch in `launch_f`.
        unsafe {
            result::launch_kernel(
                func.f,
                grid,
                (block, 1, 1),
                smem,
                self.side[p & 1],
                &mut ptrs[..args.len()],
            )
            .map_err(|e| CudaError::Driver(format!("launching {}: {e:?}", func.name)))
        }
    }

    /// Let kernel `f` be launched with up to `bytes` of dynamic shared
    /// memory (above 48 KiB a kernel must ask for it).
    pub fn allow_dynamic_smem(&self, f: Func, bytes: u32) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: `f` is a function of this Gpu's loaded module, alive for its
        // lifetime; the attribute takes a plain integer.
        unsafe {
            sys::cuFuncSetAttribute(
                f.f,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes as i32,
            )
            .result()
        }
        .map_err(|e| {
            CudaError::Driver(format!(
                "kernel {}: {bytes} B of shared memory: {e:?}",
                f.name
            ))
        })
    }

    /// The kernel called `name`.
    pub fn func(&self, name: &str) -> Result<Func, CudaError> {
        self.funcs
            .get(name)
            .copied()
            .ok_or_else(|| CudaError::Driver(format!("no kernel named {name}")))
    }

    /// Ask for programmatic dependent launch on the launches that follow
    /// (granted on sm_90 and later).
    pub fn set_pdl(&self, on: bool) {
        self.pdl
            .store(on && self.pdl_ok, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether per-kernel profiling is on ([`GpuOptions::profile`]).
    pub fn profiling(&self) -> bool {
        self.prof.is_some()
    }

    /// Fold the timed launches since the last call into the per-kernel
    /// totals (synchronises).
    pub fn profile_collect(&self) -> Result<(), CudaError> {
        let Some(p) = &self.prof else { return Ok(()) };
        self.sync()?;
        let mut p = p
            .lock()
            .map_err(|_| CudaError::Driver("profile lock".into()))?;
        let pending = std::mem::take(&mut p.pending);
        for (name, a, b) in pending {
            let mut ms = 0f32;
            // SAFETY: both events were recorded on the stream, which is synchronised.
            unsafe {
                let _ = sys::cuEventElapsedTime_v2(&mut ms, a, b);
                let _ = sys::cuEventDestroy_v2(a);
                let _ = sys::cuEventDestroy_v2(b);
            }
            let e = p.totals.entry(name).or_insert((0.0, 0));
            e.0 += ms as f64;
            e.1 += 1;
        }
        Ok(())
    }

    /// The per-kernel totals: (kernel, milliseconds, launches), largest first;
    /// clears them.
    pub fn profile_take(&self) -> Vec<(&'static str, f64, u64)> {
        let Some(p) = &self.prof else {
            return Vec::new();
        };
        let Ok(mut p) = p.lock() else {
            return Vec::new();
        };
        let mut v: Vec<_> = std::mem::take(&mut p.totals)
            .into_iter()
            .map(|(k, (ms, n))| (k, ms, n))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }

    /// Start capturing the stream's work into a graph.
    pub fn begin_capture(&self) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: the stream belongs to the bound context.
        unsafe {
            sys::cuStreamBeginCapture_v2(
                self.stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
            .result()
            .map_err(drv("starting a graph capture"))
        }
    }

    /// End the capture and instantiate the graph.
    pub fn end_capture(&self) -> Result<Graph, CudaError> {
        let mut graph = std::mem::MaybeUninit::uninit();
        // SAFETY: ends the capture begun on this stream.
        let graph = unsafe {
            sys::cuStreamEndCapture(self.stream, graph.as_mut_ptr())
                .result()
                .map_err(drv("ending a graph capture"))?;
            graph.assume_init()
        };
        let mut exec = std::mem::MaybeUninit::uninit();
        // SAFETY: instantiates the graph just captured.
        let exec = unsafe {
            match sys::cuGraphInstantiateWithFlags(exec.as_mut_ptr(), graph, 0).result() {
                Ok(()) => exec.assume_init(),
                Err(e) => {
                    let _ = sys::cuGraphDestroy(graph);
                    return Err(drv("instantiating a graph")(e));
                }
            }
        };
        Ok(Graph { graph, exec })
    }

    /// Replay `g` on the stream.
    pub fn replay(&self, g: &Graph) -> Result<(), CudaError> {
        self.count_launch();
        // SAFETY: the graph was instantiated in this context.
        unsafe { sys::cuGraphLaunch(g.exec, self.stream) }
            .result()
            .map_err(drv("launching a graph"))
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

    /// Free and total device memory, bytes.
    pub fn mem_info(&self) -> Result<(usize, usize), CudaError> {
        self.bind()?;
        result::mem_get_info().map_err(drv("querying device memory"))
    }

    /// `bytes` (at least 1) of zeroed pinned host memory that the device
    /// reads directly (`cuMemHostAlloc` with `DEVICEMAP`).
    pub fn alloc_host_mapped(&self, bytes: usize) -> Result<HostBuf, CudaError> {
        self.bind()?;
        let bytes = bytes.max(1);
        // SAFETY: a plain pinned allocation in the bound context; zeroed
        // below before anything reads it.
        let host =
            unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }.map_err(|e| {
                CudaError::OutOfMemory {
                    bytes,
                    msg: format!("pinned host memory: {e:?}"),
                }
            })? as *mut u8;
        let mut b = HostBuf {
            host,
            dev: 0,
            bytes,
            ctx: self.ctx.clone(),
        };
        b.as_mut_slice().fill(0);
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP in this context; the
        // driver writes the device address into `dev`.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut std::ffi::c_void, 0) }
            .result()
            .map_err(drv("mapping pinned host memory"))?;
        b.dev = dev;
        Ok(b)
    }

    /// `bytes` of zeroed device memory.
    pub fn zeros(&self, bytes: usize) -> Result<DevBuf, CudaError> {
        let b = self.alloc(bytes)?;
        self.memset0(b.ptr, bytes)?;
        Ok(b)
    }

    /// A device copy of `data` (synchronous), with 64 zeroed bytes of
    /// padding behind it (the matrix kernels read whole 16-byte words).
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<DevBuf, CudaError> {
        let bytes = std::mem::size_of_val(data);
        let b = self.zeros(bytes + 64)?;
        self.htod(b.ptr, data)?;
        Ok(b)
    }

    /// Host → device, ordered on the stream and finished on return.
    pub fn htod<T: Copy>(&self, dst: u64, src: &[T]) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        self.count_launch();
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
        self.count_launch();
        // SAFETY: both ranges are device allocations of at least `bytes`.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, self.stream) }
            .map_err(drv("device copy"))
    }

    pub fn memset0(&self, dst: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        self.count_launch();
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
        let f = self.func(name)?;
        self.launch_f(f, grid, block, smem, args)
    }

    /// Kernels and copies queued so far on the streams (launched or
    /// captured): a caller that saw the same count before knows nothing ran
    /// in between.
    pub fn launches(&self) -> u64 {
        self.launched.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count_launch(&self) {
        self.launched
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Queue kernel `f` on the stream (timed when profiling).
    pub fn launch_f(
        &self,
        func: Func,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<(), CudaError> {
        check_args(&func, args)?;
        self.count_launch();
        let (f, name) = (func.f, func.name);
        let ev = |flags: u32| -> Option<sys::CUevent> {
            let mut e = std::mem::MaybeUninit::uninit();
            // SAFETY: creates and records an event on our stream.
            unsafe {
                sys::cuEventCreate(e.as_mut_ptr(), flags).result().ok()?;
                let e = e.assume_init();
                sys::cuEventRecord(e, self.stream).result().ok()?;
                Some(e)
            }
        };
        let start = self.prof.as_ref().and_then(|_| ev(0));
        let mut slots = [0u64; MAX_ARGS];
        if args.len() > slots.len() {
            return Err(CudaError::Driver(format!("{name}: too many arguments")));
        }
        // The argument pointers, on the stack like the slots (no allocation
        // per launch).
        let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        arg_slots(args, &mut slots, &mut ptrs);
        if self.pdl.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: a zeroed launch attribute is a valid plain C struct; the
            // id and value set below are the programmatic-serialization pair.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            let cfg = sys::CUlaunchConfig {
                gridDimX: grid.0,
                gridDimY: grid.1,
                gridDimZ: grid.2,
                blockDimX: block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: smem,
                hStream: self.stream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for the plain launch below; `cfg` and `attr` live on
            // the stack for the duration of the call, and every kernel waits
            // for the one before it before touching what that one wrote.
            unsafe {
                sys::cuLaunchKernelEx(&cfg, f, ptrs.as_mut_ptr(), std::ptr::null_mut())
                    .result()
                    .map_err(|e| CudaError::Driver(format!("launching {name}: {e:?}")))?;
            }
        } else {
            // SAFETY: each pointer addresses an 8-byte slot holding the
            // argument in its low bytes (little-endian), as the kernel's
            // parameter types expect; the slots outlive the call, and only
            // the first `args.len()` pointers are passed.
            unsafe {
                result::launch_kernel(
                    f,
                    grid,
                    (block, 1, 1),
                    smem,
                    self.stream,
                    &mut ptrs[..args.len()],
                )
                .map_err(|e| CudaError::Driver(format!("launching {name}: {e:?}")))?;
            }
        }
        if let (Some(p), Some(a)) = (&self.prof, start) {
            if let (Some(b), Ok(mut p)) = (ev(0), p.lock()) {
                p.pending.push((name, a, b));
            }
        }
        Ok(())
    }
}

/// Each argument in the low bytes of its 8-byte slot (little-endian), and
/// the pointers to the slots, as the driver's launch takes them.
fn arg_slots(args: &[Arg], slots: &mut [u64; MAX_ARGS], ptrs: &mut [*mut c_void; MAX_ARGS]) {
    for (s, a) in slots.iter_mut().zip(args) {
        *s = match *a {
            Arg::U(v) => v,
            Arg::I(v) => v as u32 as u64,
            Arg::F(v) => v.to_bits() as u64,
            Arg::D(v) => v.to_bits(),
        };
    }
    for (p, s) in ptrs.iter_mut().zip(slots.iter_mut()) {
        *p = s as *mut u64 as *mut c_void;
    }
}

/// The usual place of the on-disk kernel cache, given the values of
/// `$XDG_CACHE_HOME` and `$HOME`: `$XDG_CACHE_HOME/redlite/cuda`, else
/// `~/.cache/redlite/cuda` (the caller reads the environment).
pub fn default_cache_dir(
    xdg_cache_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> Option<PathBuf> {
    match (xdg_cache_home, home) {
        (Some(x), _) => Some(x.join("redlite/cuda")),
        (None, Some(h)) => Some(h.join(".cache/redlite/cuda")),
        (None, None) => None,
    }
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

/// The NVRTC options every kernel is compiled with, for `arch` (`sm_XY`).
pub fn nvrtc_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "-default-device".into(),
        "-diag-suppress=177".into(),
    ]
}

/// Compile `source` for compute capability `cc` to a cubin (NUL-terminated
/// PTX when the NVRTC cannot emit a cubin for it), reusing an image cached
/// in `cache` (and storing a new one there).
pub fn compile_cached(
    source: &str,
    cc: (i32, i32),
    cache: Option<&Path>,
) -> Result<Vec<u8>, CudaError> {
    let arch = format!("sm_{}{}", cc.0, cc.1);
    let opts = nvrtc_options(&arch);
    let path = match cache {
        Some(dir) => Some(cache_path(dir, source, &arch)?),
        None => None,
    };
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
        store_cached(p, &image);
    }
    Ok(image)
}

/// Where the cache in `dir` keeps the image of `source` for `arch` (`sm_XY`)
/// compiled by this NVRTC (its version is part of the key).
pub fn cache_path(dir: &Path, source: &str, arch: &str) -> Result<PathBuf, CudaError> {
    let (maj, min) = nvrtc_version()?;
    let opts = nvrtc_options(arch);
    let key = fnv1a(&[
        source.as_bytes(),
        arch.as_bytes(),
        opts.join(" ").as_bytes(),
        format!("{maj}.{min}").as_bytes(),
    ]);
    Ok(dir.join(format!("{key:016x}-{arch}.cubin")))
}

/// Write `image` at `path` (atomically). A cache that cannot be written only
/// costs a recompile next time.
pub fn store_cached(path: &Path, image: &[u8]) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, image).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn the_kernel_cache_follows_xdg_then_home() {
        let d = |x: Option<&str>, h: Option<&str>| {
            super::default_cache_dir(x.map(PathBuf::from), h.map(PathBuf::from))
        };
        assert_eq!(
            d(Some("/x"), Some("/h")),
            Some(PathBuf::from("/x/redlite/cuda"))
        );
        assert_eq!(
            d(None, Some("/h")),
            Some(PathBuf::from("/h/.cache/redlite/cuda"))
        );
        assert_eq!(d(None, None), None);
    }
}
