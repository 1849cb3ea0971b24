"""kgen runtime: compile a generated extension once, then load it from the cache.

This file's text is inlined verbatim into every generated model_new.py (which must work when its text alone is
exec'd), so it imports nothing from kgen and prefixes every name with ``kgen_``. The text also meets the strict
rules of KernelBench's static checker (restated in tests/test_cli.py): no error handlers and no empty statements,
not even as words inside strings.

Target architectures: a set ``TORCH_CUDA_ARCH_LIST`` is left alone (torch's load_inline reads it and adds its own
-gencode flags); unset (or "native"), kgen builds for the current GPU by giving nvcc explicit -gencode flags, which
makes torch skip its own. Kernels pick their path with ``#if KGEN_SM90``: 1 when every target is sm_90 or newer
and ``KGEN_FORCE_SM80`` is not "1", else 0 (the sm_80 path); ``KGEN_SM90A`` is 1 when, on top of that, every target
is sm_90a (each device image has wgmma: host code may launch a kernel that exists only as wgmma code). A GPU below sm_80 is refused before any compile.

Cache layout: the root is ``$KGEN_CACHE_DIR``, else ``$TORCH_EXTENSIONS_DIR/kgen``, else ``~/.cache/kgen``; it holds
one folder per extension, named ``kgen_<family>_<sha8>`` where the hash covers the rendered sources, the compiler
flags (the KGEN_SM90 and KGEN_SM90A defines and the -gencode flags of the sorted target list included), the torch, CUDA and Python
versions. A build runs under an OS-level ``fcntl.flock`` (released when its file is closed or the builder dies,
unlike torch's own lock file), and a finished build records the shared object's SHA-256 in ``kgen_manifest.txt``:
a missing or mismatching manifest (an interrupted build, a truncated file) means rebuild, never load.
"""

import fcntl
import hashlib
import importlib.util
import os
import re
import sys
import types

KGEN_NVCC_FLAGS = ("-O3", "-lineinfo")
KGEN_CXX_FLAGS = ("-O3",)
KGEN_MIN_CAPABILITY = (8, 0)
# TORCH_CUDA_ARCH_LIST's names, expanded as torch expands them (combined names first).
KGEN_NAMED_ARCHS = (
    ("Kepler+Tesla", "3.7"), ("Kepler", "3.5+PTX"), ("Maxwell+Tegra", "5.3"), ("Maxwell", "5.0;5.2+PTX"),
    ("Pascal", "6.0;6.1+PTX"), ("Volta+Tegra", "7.2"), ("Volta", "7.0+PTX"), ("Turing", "7.5+PTX"),
    ("Ampere+Tegra", "8.7"), ("Ampere", "8.0;8.6+PTX"), ("Ada", "8.9+PTX"), ("Hopper", "9.0+PTX"),
    ("Blackwell+Tegra", "11.0"), ("Blackwell", "10.0;10.3;12.0;12.1+PTX"),
)
KGEN_ARCH_RE = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def kgen_cache_dir():
    """The cache root: $KGEN_CACHE_DIR, else $TORCH_EXTENSIONS_DIR/kgen, else ~/.cache/kgen."""
    if os.environ.get("KGEN_CACHE_DIR"):
        return os.environ["KGEN_CACHE_DIR"]
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "kgen")
    return os.path.join(os.path.expanduser("~"), ".cache", "kgen")


def kgen_loaded():
    """Process-wide record {library namespace: extension module}; survives exec'ing model_new.py twice."""
    mod = sys.modules.get("kgen_runtime_state")
    if mod is None:
        mod = types.ModuleType("kgen_runtime_state")
        mod.loaded = {}
        mod.registered = set()
        sys.modules["kgen_runtime_state"] = mod
    return mod


def kgen_arch_env():
    """The user's TORCH_CUDA_ARCH_LIST, stripped; "" when unset or "native" (kgen then targets the current GPU)."""
    value = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    return "" if value == "native" else value


def kgen_arch_fields(arch):
    """"9.0+PTX" -> (9, 0, "", True); None for text that is no architecture."""
    m = KGEN_ARCH_RE.match(arch)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), m.group(3), bool(m.group(4))


def kgen_parse_arch_list(text):
    """A TORCH_CUDA_ARCH_LIST value as torch reads it (space or ';' separated, names expanded), deduplicated and
    sorted by version; entries below sm_80 or unknown ones raise one RuntimeError naming them."""
    expanded = text.replace(" ", ";")
    for named, archs in KGEN_NAMED_ARCHS:
        expanded = expanded.replace(named, archs)
    archs = sorted({a for a in expanded.split(";") if a}, key=lambda a: kgen_arch_fields(a) or (0, 0, a, False))
    for arch in archs:
        fields = kgen_arch_fields(arch)
        if fields is None:
            raise RuntimeError("kgen: TORCH_CUDA_ARCH_LIST=%r has the unknown entry %r; use entries like 8.0, 8.6 or "
                               "9.0+PTX, or unset it to build for this GPU" % (text, arch))
        if fields[:2] < KGEN_MIN_CAPABILITY:
            raise RuntimeError("kgen: TORCH_CUDA_ARCH_LIST=%r includes %s, but kgen's kernels need compute capability "
                               "8.0+; remove the entries below 8.0, or unset it to build for this GPU" % (text, arch))
    if not archs:
        raise RuntimeError("kgen: TORCH_CUDA_ARCH_LIST=%r names no architecture; unset it to build for this GPU" % text)
    return archs


def kgen_target_archs(capability=None, supported=None):
    """The sorted architectures to compile for: TORCH_CUDA_ARCH_LIST's when set, else the GPU's ``capability``
    (default: the current device's; 9.0 is built as sm_90a, whose code runs on H100 / H200 only and may use wgmma).
    As torch does, a capability newer than this torch build's newest sm_XY (``supported``, default
    torch.cuda.get_arch_list()) is built as that newest one plus PTX."""
    if kgen_arch_env():
        return kgen_parse_arch_list(kgen_arch_env())
    import torch

    if capability is None:
        capability = torch.cuda.get_device_capability()
    if supported is None:
        supported = torch.cuda.get_arch_list()
    known = [int(m.group(1)) for m in (re.match(r"sm_(\d+)", s) for s in supported) if m]
    if known and tuple(capability) > divmod(max(known), 10):
        return ["%d.%d+PTX" % divmod(max(known), 10)]
    if tuple(capability) == (9, 0):  # sm_90a: the H100 / H200 build with wgmma (kernels test __CUDA_ARCH_FEAT_SM90_ALL)
        return ["9.0a"]
    return ["%d.%d" % tuple(capability)]


def kgen_sm90_path(archs=None):
    """True when the kernels are built with KGEN_SM90=1 (the Hopper path, thread block clusters): every target
    architecture is 9.0 or newer and KGEN_FORCE_SM80 is not "1". ``archs`` defaults to this process's targets."""
    if archs is None:
        archs = kgen_target_archs()
    if os.environ.get("KGEN_FORCE_SM80") == "1":
        return False
    return all(kgen_arch_fields(a)[0] >= 9 for a in archs)


def kgen_wgmma_path(archs=None):
    """True when every target is sm_90a on the Hopper path (KGEN_SM90A=1): each device image then has wgmma, so the
    host side may launch kernels that exist only as wgmma code. ``archs`` defaults to this process's targets."""
    if archs is None:
        archs = kgen_target_archs()
    return kgen_sm90_path(archs) and all(kgen_arch_fields(a)[:3] == (9, 0, "a") for a in archs)


def kgen_gencode_flags(archs):
    """nvcc's -gencode flags for the architectures, written as torch writes them (SASS, plus PTX for "+PTX")."""
    flags = []
    for arch in archs:
        major, minor, suffix, ptx = kgen_arch_fields(arch)
        num = "%d%d%s" % (major, minor, suffix)
        flags.append("-gencode=arch=compute_%s,code=sm_%s" % (num, num))
        if ptx:
            flags.append("-gencode=arch=compute_%s,code=compute_%s" % (num, num))
    return sorted(set(flags), key=flags.index)


def kgen_compile_flags(archs):
    """(C++ flags, nvcc flags) without -gencode: the base flags plus the KGEN_SM90 path define. None of them may
    contain the text "arch": torch drops its own -gencode flags when one does."""
    defines = ["-DKGEN_SM90=%d" % kgen_sm90_path(archs), "-DKGEN_SM90A=%d" % kgen_wgmma_path(archs)]
    return list(KGEN_CXX_FLAGS) + defines, list(KGEN_NVCC_FLAGS) + defines


def kgen_arch_names(archs):
    """["8.0+PTX", "9.0"] -> "sm_80+PTX, sm_90" (for messages)."""
    return ", ".join("sm_" + a.replace(".", "") for a in archs)


def kgen_build_key(cuda_source, cpp_source, archs):
    """SHA-256 over everything that changes the binary: sources, flags, sorted targets, torch/CUDA/Python versions.

    The same targets give the same key whether they come from TORCH_CUDA_ARCH_LIST or from the GPU."""
    import torch

    cxx_flags, nvcc_flags = kgen_compile_flags(archs)
    h = hashlib.sha256()
    for part in (cuda_source, cpp_source, " ".join(nvcc_flags), " ".join(cxx_flags), " ".join(kgen_gencode_flags(archs)),
                 ";".join(archs), torch.__version__, str(torch.version.cuda), "%d.%d" % sys.version_info[:2]):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def kgen_check_device(capability, name):
    """One clear error for a GPU below compute capability 8.0, raised before anything is compiled."""
    if tuple(capability) < KGEN_MIN_CAPABILITY:
        raise RuntimeError("kgen: the GPU %s has compute capability %d.%d, and kgen's kernels need compute capability "
                           "8.0+ (A100, RTX 30xx or newer); run on such a GPU" % (name, capability[0], capability[1]))


def kgen_check_archs(archs, capability, name):
    """Refuse a TORCH_CUDA_ARCH_LIST whose code cannot run on this GPU (torch would fail at the first launch with
    "no kernel image is available")."""
    for arch in archs:
        major, minor, suffix, ptx = kgen_arch_fields(arch)
        if suffix:
            runs = (major, minor) == tuple(capability)
        else:
            runs = (major == capability[0] and minor <= capability[1]) or (ptx and (major, minor) <= tuple(capability))
        if runs:
            return
    raise RuntimeError("kgen: TORCH_CUDA_ARCH_LIST=%r has no code that runs on the GPU %s (sm_%d%d); add %d.%d to it, "
                       "or unset it to build for this GPU" % (kgen_arch_env(), name, capability[0], capability[1],
                                                               capability[0], capability[1]))


def kgen_make_dir(path):
    """Create the folder and its parents; an unusable cache location raises one RuntimeError naming it and the fix
    (checked up front, so no OSError traceback)."""
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        if os.path.lexists(probe):
            raise RuntimeError("kgen: cache folder %s: %s is a file, not a folder; set KGEN_CACHE_DIR to a writable "
                               "folder" % (path, probe))
        probe = os.path.dirname(probe)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RuntimeError("kgen: cache folder %s: no write permission in %s; set KGEN_CACHE_DIR to a writable "
                           "folder" % (path, probe))
    os.makedirs(path, exist_ok=True)


def kgen_file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def kgen_cache_valid(so_path, manifest_path, key):
    if not (os.path.isfile(so_path) and os.path.isfile(manifest_path)):
        return False
    with open(manifest_path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    manifest = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
    return manifest.get("key") == key and manifest.get("so_sha256") == kgen_file_sha256(so_path)


def kgen_compile(ext_name, build_dir, cuda_source, cpp_source, archs):
    import torch.utils.cpp_extension as cpp_ext

    # We hold the flock: a torch 'lock' file here was left by a killed build and would make load_inline wait forever.
    for stale in ("lock", ext_name + ".so", "kgen_manifest.txt"):
        path = os.path.join(build_dir, stale)
        if os.path.exists(path):
            os.remove(path)
    with open(os.path.join(build_dir, "kgen_builds.log"), "a") as log:  # one line per compilation (tests count them)
        log.write("build pid=%d\n" % os.getpid())
    kwargs = {}
    if "no_implicit_headers" in cpp_ext.load_inline.__code__.co_varnames:
        kwargs["no_implicit_headers"] = True
    cxx_flags, nvcc_flags = kgen_compile_flags(archs)
    if not kgen_arch_env():  # explicit targets; a set TORCH_CUDA_ARCH_LIST is read by torch itself
        nvcc_flags += kgen_gencode_flags(archs)
    # A failed build raises torch's "Error building extension" with the compiler's lines and source paths.
    cpp_ext.load_inline(
        name=ext_name, cpp_sources=[cpp_source], cuda_sources=[cuda_source],
        extra_cflags=cxx_flags, extra_cuda_cflags=nvcc_flags,
        build_directory=build_dir, is_python_module=True, verbose=False, **kwargs)


def kgen_import(ext_name, so_path):
    """Import the built extension as a Python module (its TORCH_LIBRARY ops register as it loads); its pybind
    functions are the fast path from Python, torch.ops.<namespace> the dispatcher path."""
    spec = importlib.util.spec_from_file_location(ext_name, so_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kgen_load_extension(namespace, cuda_source, cpp_source):
    """Make the ops of TORCH_LIBRARY(namespace) available under torch.ops.<namespace>; build once, then cache.

    Returns the extension module (its pybind functions are the fast path). The first build prints one line on
    stderr; a cache hit prints nothing.
    """
    import torch

    state = kgen_loaded()
    if namespace in state.loaded:
        return state.loaded[namespace]
    device = torch.cuda.current_device()
    capability = tuple(torch.cuda.get_device_capability(device))
    name = torch.cuda.get_device_name(device)
    kgen_check_device(capability, name)
    archs = kgen_target_archs(capability)
    kgen_check_archs(archs, capability, name)
    key = kgen_build_key(cuda_source, cpp_source, archs)
    ext_name = "%s_%s" % (namespace.rsplit("_", 1)[0], key[:8])
    root = kgen_cache_dir()
    build_dir = os.path.join(root, ext_name)
    kgen_make_dir(root)
    kgen_make_dir(build_dir)
    so_path = os.path.join(build_dir, ext_name + ".so")
    manifest_path = os.path.join(build_dir, "kgen_manifest.txt")
    with open(os.path.join(root, ext_name + ".lock"), "a+") as lock:  # closing the file releases the flock
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kgen_cache_valid(so_path, manifest_path, key):
            sys.stderr.write("kgen: building %s for %s (first use; cached under %s)\n"
                             % (ext_name, kgen_arch_names(archs), root))
            sys.stderr.flush()
            kgen_compile(ext_name, build_dir, cuda_source, cpp_source, archs)
            tmp = manifest_path + ".tmp"
            with open(tmp, "w") as f:
                f.write("key %s\nso_sha256 %s\nnamespace %s\ntorch %s\ncuda %s\narch %s\narch_env %s\nsm90 %d\n" % (
                    key, kgen_file_sha256(so_path), namespace, torch.__version__, torch.version.cuda, ";".join(archs),
                    kgen_arch_env() or "-", kgen_sm90_path(archs)))
            os.replace(tmp, manifest_path)
        module = kgen_import(ext_name, so_path)
    state.loaded[namespace] = module
    return module
