"""CPU simulation of the bundled family's GEMM1 accumulation on a many-chunk shape (a development harness, no GPU):
why tests/dev/cases/sweep4901_k7x5_pool1x2s3_gelu_tanh.py missed float64 on grad_w with TF32 off, and whether
adding each K chunk's sums into Dp in float32 (g1_flush in templates/conv2d_avgpool_act_reduce/backward.cuh, shipped
in the fiftieth session; the forward's pre in registers likewise) closes it.

pre = box sums x (W/DIV)^T in 3xTF32 (operands split into TF32 hi + lo, lo*lo dropped), each m16n8k8 mma's 8 products
added to its accumulator and rounded to float32 toward zero (a model of the tensor cores' accumulation, not
round-to-nearest), over all 17 chunks of 70 k (one chain) or restarted per chunk and added in float32 (the fix).
grad_w from each pre, through the tanh gelu's derivative, is compared with the one from float64's pre at 1e-4.

Usage: python tests/dev/g1_chain_sim.py   (about a minute on two cores)"""

import numpy as np
import torch
import torch.nn.functional as F

CI, CO, KH, KW, PAD, H, W, N = 33, 16, 7, 5, (4, 2), 30, 81, 3
PKW, PSW, CI_CHUNK = 2, 3, 2   # AvgPool2d((1, 2), stride (1, 3)); derive()'s K chunk of this shape
K, KC = CI * KH * KW, CI_CHUNK * KH * KW


def tf32(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32).astype(np.float64)


def to_f32(a, toward_zero):
    f = a.astype(np.float32)
    if toward_zero:
        over = np.abs(f.astype(np.float64)) > np.abs(a)
        f[over] = np.nextafter(f[over], np.float32(0))
    return f.astype(np.float64)


def gemm1(A, B, flush, toward_zero=True):
    ah, bh = tf32(A), tf32(B)
    al, bl = tf32(A - ah), tf32(B - bh)
    tot = acc = np.zeros((A.shape[0], B.shape[0]))
    for c0 in range(0, K, KC):
        for k0 in range(c0, min(c0 + KC, K), 8):
            ks = slice(k0, min(k0 + 8, c0 + KC, K))
            for a, b in ((al, bh), (ah, bl), (ah, bh)):   # the three passes, as gemm1<X3>
                acc = to_f32(acc + a[:, ks] @ b[:, ks].T, toward_zero)
        if flush:
            tot, acc = to_f32(tot + acc, False), np.zeros_like(acc)
    return tot + acc


def main() -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(CI, CO, (KH, KW), padding=PAD).double()
    x = torch.randn(N, CI, H, W, dtype=torch.float64)
    cols = F.unfold(x, (KH, KW), padding=PAD).view(N, K, H + 2 * PAD[0] - KH + 1, -1)
    pwo = (cols.shape[-1] - PKW) // PSW + 1
    bs = torch.stack([cols[..., PSW * j:PSW * j + PKW].sum(-1) for j in range(pwo)], -1)
    bs = bs.permute(0, 2, 3, 1).reshape(-1, K)                  # positions x K
    wd = conv.weight.detach().view(CO, K) / PKW                # W / DIV
    bias = conv.bias.detach()
    g = torch.randn(N, dtype=torch.float64).repeat_interleave(bs.shape[0] // N)[:, None]

    def grad_w(pre):
        u = (torch.as_tensor(pre) + bias).requires_grad_(True)
        (d,) = torch.autograd.grad(F.gelu(u, approximate="tanh").sum(), u)
        return (d * g).T @ bs

    exact = (bs @ wd.T).numpy()
    ref = grad_w(exact)
    A, B = bs.numpy().astype(np.float32).astype(np.float64), wd.numpy().astype(np.float32).astype(np.float64)
    for label, pre in (("one chain, toward zero (before the fix)", gemm1(A, B, False)),
                       ("flushed per chunk, toward zero (shipped)", gemm1(A, B, True)),
                       ("one chain, to nearest", gemm1(A, B, False, False))):
        e = (grad_w(pre) - ref).abs()
        print(f"{label}: pre {np.abs(pre - exact).max():.2e}, grad_w {e.max():.2e} from float64, "
              f"{int((e > 1e-4 + 1e-4 * ref.abs()).sum())} of {e.numel()} outside 1e-4")


if __name__ == "__main__":
    main()
