# Measures NCCL collective bandwidth between the GPUs of one machine with PyTorch (the image has no nccl-tests):
# all-to-all, all-gather and reduce-scatter of bf16 buffers, bus bandwidth as nccl-tests defines it
# ((n-1)/n x bytes / time). Run: torchrun --nproc_per_node N scripts/device/nccl_bw_probe.py
import os, time, torch, torch.distributed as dist

dist.init_process_group("nccl")
rank, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
for mb in (8, 64, 256):
    elems = mb * 1024 * 1024 // 2 // n * n
    x = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    big = torch.empty(elems * n, device="cuda", dtype=torch.bfloat16)
    for name, op in (("all_to_all", lambda: dist.all_to_all_single(y, x)),
                     ("all_gather", lambda: dist.all_gather_into_tensor(big, x)),
                     ("reduce_scatter", lambda: dist.reduce_scatter_tensor(x[: elems // n], x))):
        for _ in range(3):
            op()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            op()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / 10
        size = x.numel() * 2 * (n if name == "all_gather" else 1)
        if rank == 0:
            print(f"{name:15s} {size / 2**20:8.1f} MiB  {dt * 1e3:8.3f} ms  busbw {size * (n - 1) / n / dt / 1e9:7.1f} GB/s")
dist.destroy_process_group()
