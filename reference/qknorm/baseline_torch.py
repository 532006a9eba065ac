"""Eager PyTorch (what a user writes first): runs anywhere, fp32 math, two passes."""
import torch


def _rmsnorm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def qknorm(q, k, norm_weight):
    return _rmsnorm(q, norm_weight), _rmsnorm(k, norm_weight)
