# Side-by-side reference numbers from PyTorch on the same GPU, for the CUDA
# kernel micro-benchmark (bench_cuda_kernels): matmul and causal SDPA, bf16.
import torch
import torch.nn.functional as F


def time_ms(f, warmup=3, iters=10):
    for _ in range(warmup):
        f()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        f()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def main():
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    print("| torch kernel | ms | TFLOP/s |")
    print("|---|---|---|")
    for name, m, n, k in [("matmul bf16 qkv 8192x2304x768", 8192, 2304, 768),
                          ("matmul bf16 lm head 8192x50304x768", 8192, 50304, 768),
                          ("matmul bf16 8192^3", 8192, 8192, 8192)]:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        ms = time_ms(lambda: x @ w.t())
        print(f"| {name} | {ms:.3f} | {2 * m * n * k / ms / 1e9:.1f} |")
    for b, h, t, d in [(8, 12, 1024, 64), (4, 16, 2048, 128)]:
        q, k, v = (torch.randn(b, h, t, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        fwd_flops = 4 * b * h * t * t * d / 2
        shape = f"B{b} H{h} T{t} D{d}"
        ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        print(f"| sdpa fwd bf16 {shape} causal | {ms:.3f} | {fwd_flops / ms / 1e9:.1f} |")
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(o)
        ms = time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
        print(f"| sdpa bwd bf16 {shape} causal | {ms:.3f} | {2.5 * fwd_flops / ms / 1e9:.1f} |")

if __name__ == "__main__":
    main()
