"""kgen runtime: compile a generated extension once, then load it from the cache.

This file's text is inlined verbatim into every generated model_new.py (which must work when its text alone is
exec'd), so it imports nothing from kgen and prefixes every name with ``kgen_``.

Cache layout: ``$KGEN_CACHE_DIR`` (default ``~/.cache/kgen``) holds one folder per extension, named
``kgen_<family>_<sha8>`` where the hash covers the rendered sources, the compiler flags, the torch and CUDA versions
and the GPU architecture. A build runs under an OS-level ``fcntl.flock`` (released by the kernel if the builder dies,
unlike torch's own lock file), and a finished build records the shared object's SHA-256 in ``kgen_manifest.txt``:
a missing or mismatching manifest (an interrupted build, a truncated file) means rebuild, never load.
"""

import fcntl
import hashlib
import os
import sys
import types

KGEN_NVCC_FLAGS = ("-O3", "-lineinfo")
KGEN_CXX_FLAGS = ("-O3",)


def kgen_cache_dir():
    return os.environ.get("KGEN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kgen")


def kgen_loaded():
    """Process-wide record {library namespace: extension name}; survives exec'ing model_new.py twice."""
    mod = sys.modules.get("kgen_runtime_state")
    if mod is None:
        mod = types.ModuleType("kgen_runtime_state")
        mod.loaded = {}
        mod.registered = set()
        sys.modules["kgen_runtime_state"] = mod
    return mod


def kgen_build_key(cuda_source, cpp_source, arch):
    import torch

    h = hashlib.sha256()
    for part in (cuda_source, cpp_source, " ".join(KGEN_NVCC_FLAGS), " ".join(KGEN_CXX_FLAGS), torch.__version__,
                 str(torch.version.cuda), arch, "%d.%d" % sys.version_info[:2]):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def kgen_file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def kgen_cache_valid(so_path, manifest_path, key):
    if not (os.path.isfile(so_path) and os.path.isfile(manifest_path)):
        return False
    with open(manifest_path) as f:
        manifest = dict(line.split(" ", 1) for line in f.read().splitlines() if " " in line)
    return manifest.get("key") == key and manifest.get("so_sha256") == kgen_file_sha256(so_path)


def kgen_compile(ext_name, build_dir, cuda_source, cpp_source, arch):
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
    old_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    try:  # a failed build raises torch's "Error building extension" with the compiler's lines and source paths
        cpp_ext.load_inline(
            name=ext_name, cpp_sources=[cpp_source], cuda_sources=[cuda_source],
            extra_cflags=list(KGEN_CXX_FLAGS), extra_cuda_cflags=list(KGEN_NVCC_FLAGS),
            build_directory=build_dir, is_python_module=False, verbose=False, **kwargs)
    finally:
        if old_arch is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old_arch


def kgen_load_extension(namespace, cuda_source, cpp_source):
    """Make the ops of TORCH_LIBRARY(namespace) available under torch.ops.<namespace>; build once, then cache.

    Returns the extension's content-hash name.
    """
    import torch

    state = kgen_loaded()
    if namespace in state.loaded:
        return state.loaded[namespace]
    major, minor = torch.cuda.get_device_capability()
    arch = "%d.%d" % (major, minor)
    key = kgen_build_key(cuda_source, cpp_source, arch)
    ext_name = "%s_%s" % (namespace.rsplit("_", 1)[0], key[:8])
    root = kgen_cache_dir()
    build_dir = os.path.join(root, ext_name)
    os.makedirs(build_dir, exist_ok=True)
    so_path = os.path.join(build_dir, ext_name + ".so")
    manifest_path = os.path.join(build_dir, "kgen_manifest.txt")
    with open(os.path.join(root, ext_name + ".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not kgen_cache_valid(so_path, manifest_path, key):
                kgen_compile(ext_name, build_dir, cuda_source, cpp_source, arch)
                tmp = manifest_path + ".tmp"
                with open(tmp, "w") as f:
                    f.write("key %s\nso_sha256 %s\nnamespace %s\ntorch %s\ncuda %s\narch %s\n" % (
                        key, kgen_file_sha256(so_path), namespace, torch.__version__, torch.version.cuda, arch))
                os.replace(tmp, manifest_path)
            torch.ops.load_library(so_path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    state.loaded[namespace] = ext_name
    return ext_name
