#!/usr/bin/env python3
"""Dev harness for templates/conv2d_avgpool_act_reduce/kernel.cu.j2 (not a pytest module).

Renders the template for a spec, compiles it with nvcc into a .so, calls the extern "C" launchers
through ctypes on torch CUDA tensors, checks forward + all grads against PyTorch (cudnn TF32 off)
and against a float64 reference, checks run-to-run bit equality, and times the bundled shape.

  python tests/dev/conv_kernel_harness.py [--quick] [--compile] [--out DIR] [--render-only DIR] [--sm80] [--arch 90]

--sm80 builds the sm_80/86/89 path (-DKGEN_SM90=0, derive()'s TILE_SM80 tiling; on an H100/H200 too), else the
Hopper path (-DKGEN_SM90=1, TILE_SM90). --ovr/--variants override tiling keys of that path (TPH, TPW, TPH_B, TPW_B,
CI_CHUNK, FWD_WFRAG) or the loop unrolls (BSU, DWU, G3U, GU).
"""
import argparse
import concurrent.futures as cf
import ctypes
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = "conv2d_avgpool_act_reduce/kernel.cu.j2"

# --------------------------------------------------------------------------------------------
# spec handling: tiling comes from the family module's derive() (the pipeline's copy, the only one)
# --------------------------------------------------------------------------------------------
BASE_KEYS = ["CI", "H", "W", "CO", "KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW",
             "PKH", "PKW", "PSH", "PSW", "DIV", "ACT", "REDUCE"]
ACTS = ("sigmoid", "tanh", "relu", "gelu", "gelu_tanh", "none")
NO_WS_FILL = False
SM80 = False  # --sm80: build and run the KGEN_SM90=0 path
ARCH = "90"
TILE_KEYS = ("TPH", "TPW", "TPH_B", "TPW_B", "CI_CHUNK", "FWD_WFRAG")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def derive(spec):
    """The family's derive() on a harness spec dict (KEEPDIM/HAS_BIAS/names do not affect tiling)."""
    from kgen.families.conv2d_avgpool_act_reduce import Spec, derive as fam_derive
    return fam_derive(Spec(**{k: spec[k] for k in BASE_KEYS}, KEEPDIM=False, HAS_BIAS=True,
                           weight_name="conv.weight", bias_name="conv.bias"))


def make_spec(CI=8, H=384, W=384, CO=64, k=3, s=1, p=0, d=1, pk=4, ps=None, div=None,
              act="tanh", reduce="sum", kh=None, kw=None, **extra):
    ps = pk if ps is None else ps
    kh = k if kh is None else kh
    kw = k if kw is None else kw
    spec = dict(CI=CI, H=H, W=W, CO=CO, KH=kh, KW=kw, SH=s, SW=s, PH=p, PW=p, DH=d, DW=d,
                PKH=pk, PKW=pk, PSH=ps, PSW=ps, DIV=(pk * pk if div is None else div),
                ACT=act, REDUCE=reduce)
    spec.update(extra)
    return spec


def render(spec, name=None):
    import jinja2

    from kgen.render import environment
    # another template tree (baseline A/B timing; it must take the same context and extern "C" ABI)
    troot = spec.get("TROOT", os.path.join(ROOT, "templates"))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(troot),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters.update(environment().filters)
    ctx = {k: spec[k] for k in BASE_KEYS}
    ctx.update(derive(spec))
    path = "TILE_SM80" if SM80 else "TILE_SM90"
    ctx[path] = dict(ctx[path])
    for k, v in spec.get("OVR", {}).items():  # harness-only overrides for A/B timing
        if k in TILE_KEYS:
            ctx[path][k] = v
        else:
            ctx[k] = v
    if any(k in TILE_KEYS for k in spec.get("OVR", {})):
        ctx[path].update(tile_smem(spec, ctx[path]))
    if name is None:
        key = repr(sorted((k, repr(v)) for k, v in ctx.items())) + troot + path
        name = "kgen_conv2d_avgpool_act_reduce_" + hashlib.sha1(key.encode()).hexdigest()[:8]
    ctx["name"] = name
    return name, env.get_template(TEMPLATE).render(**ctx)


def tile_smem(spec, t):
    """F_SMEM / B_SMEM of an overridden tiling, as the template lays them out (its static_assert checks the sum)."""
    from kgen.families.conv2d_avgpool_act_reduce import _r, smem_bytes
    d = derive(spec)
    co_all = _r(_r(spec["CO"], 16), min(_r(spec["CO"], 16), 64))
    pr = (spec["PKH"] - 1) * spec["SH"] + (spec["KH"] - 1) * spec["DH"] + 1
    pc = (spec["PKW"] - 1) * spec["SW"] + (spec["KW"] - 1) * spec["DW"] + 1
    hh = 0 if -(-d["PHO"] // t["TPH_B"]) == 1 else (pr - 1) // (spec["PSH"] * spec["SH"])
    hw = 0 if -(-d["PWO"] // t["TPW_B"]) == 1 else (pc - 1) // (spec["PSW"] * spec["SW"])
    fw, bw = smem_bytes(spec["KH"] * spec["KW"], co_all, t["FWD_WFRAG"], t["CI_CHUNK"], _r(t["TPH"] * t["TPW"], 16),
                        _r((t["TPH_B"] + hh) * (t["TPW_B"] + hw), 16))
    return dict(F_SMEM=fw, B_SMEM=bw)


def compile_so(spec, workdir):
    name, src = render(spec)
    cu = os.path.join(workdir, name + ".cu")
    so = os.path.join(workdir, name + ".so")
    with open(cu, "w") as f:
        f.write(src)
    t0 = time.time()
    r = subprocess.run(["nvcc", "-O3", "-std=c++17", f"-arch=sm_{ARCH}", f"-DKGEN_SM90={0 if SM80 else 1}", "-shared",
                        "-Xcompiler", "-fPIC", "-Xptxas", "-v", "-o", so, cu], capture_output=True, text=True)
    log = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"nvcc failed for {name}:\n{log}")
    ptx = [ln.strip() for ln in log.splitlines()
           if ("registers" in ln or "spill" in ln or "stack frame" in ln)]
    return name, so, ptx, time.time() - t0


def compile_cu(cu, workdir):
    """A rendered kernel.cu (e.g. an older generated/ file, for --base-cu) -> (name, .so)."""
    import re
    src = open(cu).read()
    name = re.search(r'extern "C" \S+ (\w+)_workspace_bytes', src).group(1)
    so = os.path.join(workdir, name + "_base.so")
    r = subprocess.run(["nvcc", "-O3", "-std=c++17", f"-arch=sm_{ARCH}", f"-DKGEN_SM90={0 if SM80 else 1}", "-shared",
                        "-Xcompiler", "-fPIC", "-o", so, cu], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvcc failed for {cu}:\n{r.stderr[-3000:]}")
    return name, so, "size_t" in re.search(r'extern "C" (\S+) \w+_workspace_bytes', src).group(1)


class Kernel:
    def __init__(self, name, so, old_abi=False, tf32=0):
        lib = ctypes.CDLL(so)
        # the launchers take the TF32 mode (int tf32 before the stream) from session 15 on; its source lies beside it
        cu = so[:-3] + ".cu"
        self.tf32_abi = os.path.exists(cu) and "int tf32, cudaStream_t" in open(cu).read()
        self.tf32 = tf32  # 1: the one-pass TF32 kernels (cudnn.allow_tf32), 0: 3xTF32
        mode = [ctypes.c_int] if self.tf32_abi else []
        self.ws_bytes = getattr(lib, name + "_workspace_bytes")
        self.old_abi = old_abi  # before v9: size_t <name>_workspace_bytes(int64_t n), the backward's bytes
        if old_abi:
            self.ws_bytes.restype = ctypes.c_size_t
            self.ws_bytes.argtypes = [ctypes.c_int64]
        else:
            self.ws_bytes.restype = ctypes.c_int
            self.ws_bytes.argtypes = [ctypes.c_int64, ctypes.c_int] + mode + [ctypes.POINTER(ctypes.c_size_t)]
        self.fwd = getattr(lib, name + "_forward")
        self.fwd.restype = ctypes.c_int
        self.fwd.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] + mode + [ctypes.c_void_p]
        self.bwd = getattr(lib, name + "_backward")
        self.bwd.restype = ctypes.c_int
        self.bwd.argtypes = [ctypes.c_void_p] * 8 + [ctypes.c_int64] + mode + [ctypes.c_void_p]
        self.lib = lib

    def _mode(self):
        return [self.tf32] if self.tf32_abi else []

    @staticmethod
    def _p(t):
        return None if t is None else ctypes.c_void_p(t.data_ptr())

    def workspace(self, n):
        """One buffer for both directions (the larger of the forward's and the backward's needs)."""
        import torch
        nb = int(self.ws_bytes(n)) if self.old_abi else 0
        for backward in (() if self.old_abi else (0, 1)):
            b = ctypes.c_size_t(0)
            if self.ws_bytes(n, backward, *self._mode(), ctypes.byref(b)) != 0:
                raise RuntimeError("workspace query failed")
            nb = max(nb, b.value)
        ws = torch.empty(max(nb, 16), dtype=torch.uint8, device="cuda")
        if not NO_WS_FILL:  # --no-ws-fill: leave it uninitialised (as at::empty does), for compute-sanitizer initcheck
            ws.fill_(0xFF)  # NaN pattern: the kernels must not rely on zeroed scratch
        return ws

    def forward(self, x, w, b, out, ws, n):
        import torch
        err = self.fwd(self._p(x), self._p(w), self._p(b), self._p(out), self._p(ws), n, *self._mode(),
                       ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if err != 0:
            raise RuntimeError(f"forward returned cudaError {err}")

    def backward(self, go, x, w, b, gx, gw, gb, ws, n):
        import torch
        err = self.bwd(self._p(go), self._p(x), self._p(w), self._p(b), self._p(gx), self._p(gw), self._p(gb),
                       self._p(ws), n, *self._mode(), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if err != 0:
            raise RuntimeError(f"backward returned cudaError {err}")


# --------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------
def torch_ref(spec, x, w, b):
    import torch
    import torch.nn.functional as F
    y = F.conv2d(x, w, b, stride=(spec["SH"], spec["SW"]), padding=(spec["PH"], spec["PW"]),
                 dilation=(spec["DH"], spec["DW"]))
    dov = None if spec["DIV"] == spec["PKH"] * spec["PKW"] else spec["DIV"]
    y = F.avg_pool2d(y, (spec["PKH"], spec["PKW"]), (spec["PSH"], spec["PSW"]), 0, False, True, dov)
    a = spec["ACT"]
    if a == "sigmoid":
        y = torch.sigmoid(y)
    elif a == "tanh":
        y = torch.tanh(y)
    elif a == "relu":
        y = torch.relu(y)
    elif a == "gelu":
        y = F.gelu(y)
    elif a == "gelu_tanh":
        y = F.gelu(y, approximate="tanh")
    return y.sum(dim=(1, 2, 3)) if spec["REDUCE"] == "sum" else y.mean(dim=(1, 2, 3))


def rel(a, ref):
    import torch
    a, ref = a.double(), ref.double()
    den = ref.norm().item()
    num = (a - ref).norm().item()
    return num / den if den > 0 else num


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------
def check_case(label, spec, kern, n, bias, log):
    import torch
    torch.manual_seed(hash(label) & 0xFFFF)
    conv = torch.nn.Conv2d(spec["CI"], spec["CO"], (spec["KH"], spec["KW"]), bias=bias)
    w = conv.weight.detach().float().cuda().contiguous()
    b = conv.bias.detach().float().cuda().contiguous() if bias else None
    # inputs made on the host and copied (initcheck tracks copies, not writes by kernels outside --kernel-name)
    x = torch.rand(n, spec["CI"], spec["H"], spec["W"]).cuda()
    go = (torch.rand(n) + 0.5).cuda()
    res = dict(label=label, n=n, ok=True, msgs=[])
    ws = kern.workspace(n)
    # ---- kgen forward / backward (twice, bit equality) ----
    outs, grads = [], []
    for rep in range(2):
        out = torch.full((n,), float("nan"), device="cuda")
        kern.forward(x, w, b, out, ws, n)
        gx = torch.full_like(x, float("nan"))
        gw = torch.full_like(w, float("nan"))
        gb = torch.full_like(b, float("nan")) if bias else None
        kern.backward(go, x, w, b, gx, gw, gb, ws, n)
        torch.cuda.synchronize()
        outs.append(out)
        grads.append((gx, gw, gb))
    bit = torch.equal(outs[0], outs[1]) and all(
        (p is None and q is None) or torch.equal(p, q) for p, q in zip(grads[0], grads[1]))
    # partial-gradient requests (only grad_w; only grad_x)
    gw_only = torch.full_like(w, float("nan"))
    kern.backward(go, x, w, b, None, gw_only, None, ws, n)
    gx_only = torch.full_like(x, float("nan"))
    kern.backward(go, x, w, b, gx_only, None, None, ws, n)
    torch.cuda.synchronize()
    # ---- PyTorch float32 reference ----
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    br = b.clone().requires_grad_(True) if bias else None
    ref = torch_ref(spec, xr, wr, br)
    ref.backward(go)
    # ---- float64 reference ----
    xd = x.double().requires_grad_(True)
    wd = w.double().requires_grad_(True)
    bd = b.double().requires_grad_(True) if bias else None
    refd = torch_ref(spec, xd, wd, bd)
    refd.backward(go.double())
    out = outs[0]
    gx, gw, gb = grads[0]
    pairs = [("out", out, ref.detach(), refd.detach()), ("gx", gx, xr.grad, xd.grad), ("gw", gw, wr.grad, wd.grad)]
    if bias:
        pairs.append(("gb", gb, br.grad, bd.grad))
    pairs.append(("gw_only", gw_only, wr.grad, wd.grad))
    pairs.append(("gx_only", gx_only, xr.grad, xd.grad))
    errs = {}
    for nm, a, r32, r64 in pairs:
        if r32 is None:  # n == 0: grads are zero-size or zeros
            r32 = torch.zeros_like(a)
            r64 = r32.double()
        errs[nm] = (rel(a, r64), rel(r32, r64))
        try:
            torch.testing.assert_close(a, r32, atol=1e-4, rtol=1e-4)
        except AssertionError as e:
            res["ok"] = False
            res["msgs"].append(f"{nm}: {str(e).splitlines()[0:4]}")
    if not bit:
        res["ok"] = False
        res["msgs"].append("not bit-identical across runs")
    res["errs"] = errs
    res["bit"] = bit
    log(f"[{ 'PASS' if res['ok'] else 'FAIL'}] {label} n={n} bias={bias} bit={bit} " +
        " ".join(f"{k}:{v[0]:.1e}(torch {v[1]:.1e})" for k, v in errs.items()))
    for m in res["msgs"]:
        log("    " + m)
    return res


def cases(quick):
    B = make_spec
    cs = [
        ("bundled-tanh-sum", make_spec(act="tanh"), 4, True),
        ("k1-pool2-relu-mean", B(CI=8, H=33, W=35, CO=16, k=1, pk=2, act="relu", reduce="mean"), 3, True),
        ("k5-p2-pool3s2-gelu", B(CI=3, H=37, W=41, CO=16, k=5, p=2, pk=3, ps=2, act="gelu"), 2, True),
        ("k3-s2-p1-pool2-sigmoid", B(CI=5, H=40, W=38, CO=24, k=3, s=2, p=1, pk=2, act="sigmoid", reduce="mean"), 3, False),
        ("k3-d2-p2-pool3s1-geluT", B(CI=4, H=29, W=31, CO=16, k=3, d=2, p=2, pk=3, ps=1, act="gelu_tanh"), 2, True),
        ("k3-pool4-div5-none", B(CI=8, H=37, W=41, CO=64, k=3, pk=4, div=5, act="none"), 2, True),
        ("k3-p1-pool4-tanh-mean-b1", B(CI=8, H=64, W=64, CO=64, k=3, p=1, pk=4, act="tanh", reduce="mean"), 1, True),
        ("bigK-ci24-k5-sigmoid", B(CI=24, H=30, W=26, CO=32, k=5, p=1, pk=2, act="sigmoid"), 2, True),
        ("co80-k3-pool2s1-relu", B(CI=6, H=21, W=19, CO=80, k=3, pk=2, ps=1, act="relu"), 2, True),
        ("k2x3-s2-pool3s2-tanh", B(CI=3, H=45, W=52, CO=16, kh=2, kw=3, s=2, pk=3, ps=2, act="tanh"), 3, True),
        ("n0-gelu", B(CI=3, H=20, W=20, CO=16, k=3, pk=2, act="gelu"), 0, True),
    ]
    if quick:
        cs = [c for c in cs if not c[0].startswith("bundled")] + [("bundled-tanh-sum", make_spec(act="tanh"), 2, True)]
    return cs


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------
def bench(fn, warm=5, reps=25):
    import torch
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def timings(kern_by_act, do_compile, log):
    import torch
    rows = []
    # bandwidth
    a = torch.empty(256 * 1024 * 1024, dtype=torch.float32, device="cuda").uniform_()
    bb = torch.empty_like(a)
    med, _ = bench(lambda: bb.copy_(a))
    rows.append(("d2d copy 1 GiB (GB/s r+w)", f"{2 * a.numel() * 4 / med / 1e6:.0f}", ""))
    del a, bb
    torch.cuda.empty_cache()
    for act, (spec, kern) in kern_by_act.items():
        n = 128
        conv = torch.nn.Conv2d(spec["CI"], spec["CO"], spec["KH"]).cuda()
        w = conv.weight.detach().contiguous()
        b = conv.bias.detach().contiguous()
        x = torch.rand(n, spec["CI"], spec["H"], spec["W"], device="cuda")
        out = torch.empty(n, device="cuda")
        go = torch.ones(n, device="cuda")
        gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
        ws = kern.workspace(n)

        def kf():
            kern.forward(x, w, b, out, ws, n)

        def kfb():
            kern.forward(x, w, b, out, ws, n)
            kern.backward(go, x, w, b, gx, gw, gb, ws, n)

        def kb():
            kern.backward(go, x, w, b, gx, gw, gb, ws, n)

        m1 = bench(kf)
        m2 = bench(kfb)
        m3 = bench(kb)
        rows.append((f"kgen fwd [{act}]", f"{m1[0]:.3f}", f"min {m1[1]:.3f}"))
        rows.append((f"kgen bwd [{act}]", f"{m3[0]:.3f}", f"min {m3[1]:.3f}"))
        rows.append((f"kgen fwd+bwd [{act}]", f"{m2[0]:.3f}", f"min {m2[1]:.3f}"))
        if act == list(kern_by_act)[0]:
            m4 = bench(lambda: kern.backward(go, x, w, b, None, gw, gb, ws, n))
            m5 = bench(lambda: kern.backward(go, x, w, b, gx, None, None, ws, n))
            rows.append((f"kgen bwd gw+gb only [{act}]", f"{m4[0]:.3f}", ""))
            rows.append((f"kgen bwd gx only [{act}]", f"{m5[0]:.3f}", ""))
        if act != list(kern_by_act)[0]:
            continue
        xr = x.clone().requires_grad_(True)
        wr = w.clone().requires_grad_(True)
        br = b.clone().requires_grad_(True)

        def ef():
            with torch.no_grad():
                torch_ref(spec, x, w, b)

        def efb():
            xr.grad = wr.grad = br.grad = None
            torch_ref(spec, xr, wr, br).backward(go)

        e1 = bench(ef, 2, 10)
        e2 = bench(efb, 2, 10)
        rows.append(("eager fwd", f"{e1[0]:.3f}", ""))
        rows.append(("eager fwd+bwd", f"{e2[0]:.3f}", ""))
        if do_compile:
            cf_ = torch.compile(lambda x_, w_, b_: torch_ref(spec, x_, w_, b_))
            try:
                def cfw():
                    with torch.no_grad():
                        cf_(x, w, b)

                def cfb():
                    xr.grad = wr.grad = br.grad = None
                    cf_(xr, wr, br).backward(go)
                c1 = bench(cfw, 3, 10)
                c2 = bench(cfb, 3, 10)
                rows.append(("torch.compile fwd", f"{c1[0]:.3f}", ""))
                rows.append(("torch.compile fwd+bwd", f"{c2[0]:.3f}", ""))
            except Exception as ex:  # noqa
                rows.append(("torch.compile", "failed", str(ex)[:60]))
        del x, xr, gx
        torch.cuda.empty_cache()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--render-only", default=None, help="render + nvcc -c into DIR, no GPU")
    ap.add_argument("--profile", action="store_true", help="only run bundled fwd+bwd a few times (for ncu)")
    ap.add_argument("--variants", default="", help="';'-separated tiling overrides to time, e.g. 'TPH=4,TPW=32'")
    ap.add_argument("--variant-act", default="sigmoid")
    ap.add_argument("--ovr", default="", help="override applied to every correctness case, e.g. FWD_WFRAG=0")
    ap.add_argument("--time-acts", default="tanh", help="comma list of ACTs to time on the bundled shape")
    ap.add_argument("--base", default="", help="template root of a baseline version, timed beside the current one")
    ap.add_argument("--base-cu", default="", help="a rendered bundled kernel.cu (e.g. from generated/ in git history), "
                    "timed beside the current one (its act must match --variant-act)")
    ap.add_argument("--no-ws-fill", action="store_true", help="leave the workspace uninitialised (initcheck)")
    ap.add_argument("--checks-only", action="store_true", help="no timings")
    ap.add_argument("--small", action="store_true", help="skip the bundled-shape correctness case")
    ap.add_argument("--sm80", action="store_true", help="build the sm_80/86/89 path (-DKGEN_SM90=0)")
    ap.add_argument("--arch", default="90", help="nvcc -arch=sm_<ARCH> (default 90)")
    ap.add_argument("--tf32", action="store_true", help="time the one-pass TF32 kernels (the checks stay 3xTF32)")
    ap.add_argument("--check-root", default="", help="template root for the correctness cases (default: templates/)")
    args = ap.parse_args()
    global NO_WS_FILL, SM80, ARCH
    NO_WS_FILL = args.no_ws_fill
    SM80, ARCH = args.sm80, args.arch
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "conv_harness.log"), "w")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    if args.profile:
        import torch
        sp = make_spec(act="sigmoid")
        work = tempfile.mkdtemp(prefix="kgen_prof_")
        name, so, ptx, _ = compile_so(sp, work)
        print("\n".join(ptx))
        subprocess.run(f"cuobjdump -sass {so} > {os.path.join(args.out, 'bundled.sass')}", shell=True)
        kern = Kernel(name, so)
        n = 128
        conv = torch.nn.Conv2d(8, 64, 3).cuda()
        w, b = conv.weight.detach().contiguous(), conv.bias.detach().contiguous()
        x = torch.rand(n, 8, 384, 384, device="cuda")
        out, go = torch.empty(n, device="cuda"), torch.ones(n, device="cuda")
        gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
        ws = kern.workspace(n)
        for _ in range(2):
            kern.forward(x, w, b, out, ws, n)
            kern.backward(go, x, w, b, gx, gw, gb, ws, n)
        torch.cuda.synchronize()
        return
    cs = cases(args.quick)
    if args.check_root:
        cs = [(l, dict(sp, TROOT=os.path.abspath(args.check_root)), n, b) for l, sp, n, b in cs]
    if args.small:
        cs = [c for c in cs if not c[0].startswith("bundled")]
    if args.ovr:
        govr = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.ovr.split(",")}
        cs = [(l + "@" + args.ovr, dict(sp, OVR=govr), n, b) for l, sp, n, b in cs]
    time_specs = {a: make_spec(act=a) for a in args.time_acts.split(",") if a}
    for v in args.variants.split(";"):
        if v:  # e.g. "TPH=4,TPW=32"
            ovr = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in v.split(",")}
            time_specs[f"{args.variant_act}+{v}"] = make_spec(act=args.variant_act, OVR=ovr)
    if args.base:
        time_specs[f"BASE-{args.variant_act}"] = make_spec(act=args.variant_act, TROOT=os.path.abspath(args.base))
    if args.checks_only:
        time_specs = {}
    specs = {lbl: sp for lbl, sp, _, _ in cs}
    for a, sp in time_specs.items():
        specs["time-" + a] = sp
    work = args.render_only or tempfile.mkdtemp(prefix="kgen_conv_")
    os.makedirs(work, exist_ok=True)
    built = {}
    uniq = {}
    for lbl, sp in specs.items():
        uniq.setdefault(render(sp)[0], (lbl, sp))
    with cf.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        futs = {ex.submit(compile_so, sp, work): lbl for lbl, sp in uniq.values()}
        for fu in cf.as_completed(futs):
            lbl = futs[fu]
            name, so, ptx, dt = fu.result()
            for l2, sp2 in specs.items():
                if render(sp2)[0] == name:
                    built[l2] = (name, so)
            d = derive(specs[lbl])["TILE_SM80" if SM80 else "TILE_SM90"]
            log(f"built {lbl} ({dt:.0f}s) sm_{ARCH} KGEN_SM90={0 if SM80 else 1} tiles fwd {d['TPH']}x{d['TPW']} "
                f"bwd {d['TPH_B']}x{d['TPW_B']} ci_chunk {d['CI_CHUNK']} smem {d['F_SMEM']}/{d['B_SMEM']}")
            for ln in ptx:
                log("    " + ln)
    if args.render_only:
        return
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    log(f"device: {torch.cuda.get_device_name()} torch {torch.__version__}")
    results = []
    for lbl, sp, n, bias in cs:
        kern = Kernel(*built[lbl])
        try:
            results.append(check_case(lbl, sp, kern, n, bias, log))
        except Exception as e:  # noqa
            log(f"[ERROR] {lbl}: {e!r}")
            results.append(dict(label=lbl, n=n, ok=False, errs={}, bit=False, msgs=[repr(e)]))
    kerns = {a: (sp, Kernel(*built["time-" + a], tf32=int(args.tf32))) for a, sp in time_specs.items()}
    if args.base_cu and time_specs:
        bname, bso, old_abi = compile_cu(args.base_cu, work)
        kerns[f"BASE-CU-{args.variant_act}"] = (make_spec(act=args.variant_act), Kernel(bname, bso, old_abi))
    torch.backends.cudnn.allow_tf32 = args.tf32  # eager and torch.compile in the mode kgen is timed in
    rows = timings(kerns, args.compile, log) if time_specs else []
    # ---------------- compact summary LAST ----------------
    log("\n==== correctness (rel err vs float64; torch f32 in parentheses) ====")
    for r in results:
        e = r["errs"]
        log(f"{'PASS' if r['ok'] else 'FAIL'} {r['label']:<28} n={r['n']:<3} bit={int(r['bit'])} " +
            " ".join(f"{k}={v[0]:.1e}({v[1]:.0e})" for k, v in e.items() if not k.endswith("_only")))
    log(f"==== timings on {torch.cuda.get_device_name()} (ms, median) ====")
    for a, b_, c in rows:
        log(f"{a:<34} {b_:>10} {c}")
    log(f"ALL {'PASS' if all(r['ok'] for r in results) else 'FAIL'}")


if __name__ == "__main__":
    main()
