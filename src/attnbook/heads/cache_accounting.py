r"""What a decoder caches per token: multi-head, multi-query, grouped-query and latent attention (chapter 13).

Per token and layer a decoder stores (numbers, times the bytes of the cache's dtype):

=================  =================================  =========================================
scheme             numbers per token and layer         what they are
=================  =================================  =========================================
``multi_head``     :math:`H (d_h + d_v)`               a key and a value for each of the H heads
``grouped_query``  :math:`H_{kv} (d_h + d_v)`          a key and a value per key-value head
``multi_query``    :math:`d_h + d_v`                   one key and one value for all heads
``latent``         :math:`d_c + d_R`                   the latent :math:`c^{KV}_t` and the rotary key :math:`k^R_t`
=================  =================================  =========================================

(:math:`d_v = d_h` unless said.) :func:`cache_bytes_per_token` gives one layer's bytes per token,
or the whole model's with ``layers``; :func:`cache_bytes` multiplies by the tokens and the batch.
:func:`attnbook.kv_cache_bytes` (chapter 9) is the grouped-query row for n tokens with
:math:`d_v = d_h`, and agrees with these.
"""

from __future__ import annotations

import torch

from ..validators import check_one_of, check_sizes, check_type

SCHEMES = ("multi_head", "multi_query", "grouped_query", "latent")

#: the sizes each scheme needs (d_value is optional and defaults to d_head)
_NEEDS = {
    "multi_head": ("num_heads", "d_head"),
    "multi_query": ("d_head",),
    "grouped_query": ("kv_heads", "d_head"),
    "latent": ("d_latent", "d_rope"),
}


# numbers per token and layer: H (d_h + d_v) | d_h + d_v | H_kv (d_h + d_v) | d_c + d_R
def cache_numbers_per_token(
    scheme: str,
    *,
    num_heads: int | None = None,
    kv_heads: int | None = None,
    d_head: int | None = None,
    d_value: int | None = None,
    d_latent: int | None = None,
    d_rope: int | None = None,
) -> int:
    r"""How many numbers one layer caches per token under ``scheme`` (chapter 13; table in the module docstring).

    Args:
        scheme: ``"multi_head"``, ``"multi_query"``, ``"grouped_query"`` or ``"latent"``.
        num_heads: H (multi-head).
        kv_heads: H_kv (grouped-query).
        d_head: the key width d_h (every scheme but latent).
        d_value: the value width d_v (default d_head).
        d_latent, d_rope: d_c and d_R (latent).
    """
    check_one_of("scheme", scheme, SCHEMES)
    sizes = dict(
        num_heads=num_heads, kv_heads=kv_heads, d_head=d_head, d_value=d_value, d_latent=d_latent, d_rope=d_rope
    )
    check_sizes(**sizes)
    missing = [name for name in _NEEDS[scheme] if sizes[name] is None]
    if missing:
        raise ValueError(f"scheme {scheme!r} needs {', '.join(_NEEDS[scheme])}; missing {', '.join(missing)}")
    if scheme == "latent":
        return d_latent + d_rope
    pair = d_head + (d_head if d_value is None else d_value)  # a key and a value
    heads = {"multi_head": num_heads, "grouped_query": kv_heads, "multi_query": 1}[scheme]
    return heads * pair


# bytes per token = layers * numbers per token and layer * bytes per number
def cache_bytes_per_token(
    scheme: str,
    *,
    num_heads: int | None = None,
    kv_heads: int | None = None,
    d_head: int | None = None,
    d_value: int | None = None,
    d_latent: int | None = None,
    d_rope: int | None = None,
    layers: int = 1,
    dtype: torch.dtype = torch.bfloat16,
) -> int:
    r"""Bytes of cache per token: :math:`\text{layers} \times \text{numbers per token and layer} \times \text{bytes per number}` (chapter 13).

    ``layers=1`` gives one layer's share, the model's number of layers the whole model's. The
    sizes are those of :func:`cache_numbers_per_token`; ``dtype`` is the cache's (bfloat16 by default).
    """
    check_sizes(layers=layers)
    check_type("dtype", dtype, torch.dtype, "torch.dtype")
    numbers = cache_numbers_per_token(
        scheme, num_heads=num_heads, kv_heads=kv_heads, d_head=d_head, d_value=d_value, d_latent=d_latent, d_rope=d_rope
    )
    return layers * numbers * torch.empty((), dtype=dtype, device="meta").element_size()


# bytes = batch * n_tokens * bytes per token
def cache_bytes(scheme: str, n_tokens: int, *, batch: int = 1, **config: object) -> int:
    r"""Bytes of the whole cache: :math:`\text{batch} \times n \times` :func:`cache_bytes_per_token` (chapter 13).

    ``config`` holds the keyword arguments of :func:`cache_bytes_per_token` (sizes, ``layers``, ``dtype``).
    """
    check_sizes(minimum=0, n_tokens=n_tokens, batch=batch)
    return batch * n_tokens * cache_bytes_per_token(scheme, **config)
