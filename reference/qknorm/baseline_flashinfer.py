"""The original's baseline: two flashinfer rmsnorm calls on the strided 3D views."""
import flashinfer
import torch


def qknorm(q, k, norm_weight):
    q_o = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    k_o = torch.empty(k.shape, device=k.device, dtype=k.dtype)
    flashinfer.norm.rmsnorm(q, norm_weight, out=q_o)
    flashinfer.norm.rmsnorm(k, norm_weight, out=k_o)
    return q_o, k_o
