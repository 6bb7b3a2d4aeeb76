"""Grouped-query softmax attention: the reference maths (`attend`, also what the samplers'
new tokens over their cache use) and the fused kernel for training and prefill
(`fused_attend`). Shape letters: the legend in rlvr_jax/types.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def attend(q_B_T_Q_H: jax.Array, k_B_S_K_H: jax.Array, v_B_S_K_H: jax.Array,
           mask_B_T_S: jax.Array) -> jax.Array:
    """Grouped-query softmax attention (Vaswani et al. 2017; Ainslie et al. 2023):

        out[b, t, q] = sum_s softmax_s(q[b, t, q] . k[b, s, q // J] / sqrt(H)) v[b, s, q // J]

    over the slots s where mask[b, t, s] is set; J = Q / K query heads share each kv head.
    Scores and softmax in float32; the output in v's dtype, [B, T, Q * H]. A fully masked row
    (a pad query) gets a uniform softmax instead of NaN (a finite minimum, not -inf): its output
    is never read. The reference that `fused_attend` is tested against."""
    b, t, nh, hd = q_B_T_Q_H.shape
    nkv = k_B_S_K_H.shape[2]
    q_B_T_K_J_H = q_B_T_Q_H.reshape(b, t, nkv, nh // nkv, hd)
    scores = jnp.einsum("btkjh,bskh->bkjts", q_B_T_K_J_H, k_B_S_K_H,
                        preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(hd))
    scores = jnp.where(mask_B_T_S[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v_B_S_K_H.dtype)
    out = jnp.einsum("bkjts,bskh->btkjh", probs, v_B_S_K_H)
    return out.reshape(b, t, nh * hd)


def fused_attend(q_B_T_Q_H: jax.Array, k_B_S_K_H: jax.Array, v_B_S_K_H: jax.Array,
                 mask_B_T_S: jax.Array) -> jax.Array:
    """`attend`'s maths through `jax.nn.dot_product_attention`, for training and prefill: cuDNN's
    fused (flash) attention on GPUs where it applies (no [B, Q, T, S] scores held for the
    backward pass), XLA's own elsewhere; [B, T, Q * H]."""
    b, t, nh, hd = q_B_T_Q_H.shape
    out = jax.nn.dot_product_attention(q_B_T_Q_H, k_B_S_K_H.astype(q_B_T_Q_H.dtype),
                                       v_B_S_K_H.astype(q_B_T_Q_H.dtype),
                                       mask=mask_B_T_S[:, None])
    return out.reshape(b, t, nh * hd)
