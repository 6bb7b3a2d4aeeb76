"""Decoder-only policy LM of the Llama / Qwen2 family in flax.linen.

RMSNorm (Zhang & Sennrich 2019), rotary position embeddings in the "rotate half" layout that
HF Llama/Qwen2 use (Su et al. 2021, arXiv:2104.09864; models/rope.py), grouped-query attention
(Ainslie et al. 2023, arXiv:2305.13245), SwiGLU MLP (Shazeer 2020), optional q/k/v bias (Qwen2)
and tied embeddings. Parameter names follow the HF module names, except that q/k/v and gate/up
are stored fused, as vLLM does: `qkv_proj` (kernel [D, (Nh + 2 Nkv) Hd]) and `gate_up_proj`
([D, 2 F]), each one matmul. HF import joins the kernels and export splits them (hf.py).

The entry points share one `Block`, whose N copies are stacked parameters run by `lax.scan`
(`Decoder`); the samplers' steps run them one after the other, each layer's weights and cache
in buffers of their own (models/kv_cache.py). Training and prefill attend through
`fused_attend`; a sampler's new tokens are written into their layer's cache first and then
attend over it with the reference `attend` (models/attention.py).

    apply = lambda method, *a: Decoder(cfg, vocab).apply({"params": p}, *a, method=method)
    hidden_B_T_D = apply("forward", tokens_B_T, mask_B_T)            # training: all positions
    hidden_B_R_D = apply("response_hidden", tokens_B_T, mask_B_T, L, G)  # the trainer's: the
        # positions that predict the response; G > 1 computes each group's prompt once
    hidden_K_C_D = apply("forward_packed", *packed_microbatch)     # the packed update's
    logits_B_T_V = apply("head", hidden_B_T_D)                       # float32; caller decides where
    last_logits_B_V, cache = apply("prefill", prompt_B_L, mask_B_L, slots)   # sampler, once
    logits_B_V, cache = apply("decode_step", token_B, valid_B, rope_B, cache, index)  # per token
    hidden_B_O_D, cache = apply("extend", tokens_B_O, valid_B_O, cache, index_B, position_B)
        # O tokens per row at its own slot: a multi-turn turn's token or an observation

Shape letters (the legend in types.py): N layers, B sequences, T tokens, S cache slots,
D hidden, Q query heads, K kv heads, J = Q / K query heads per kv head, H head dim, V
vocabulary. The cache is an explicit pytree (N arrays [B, S, K, H] of keys and of values),
never a flax mutable collection: the sampler owns it and threads it through
`lax.while_loop`. The head is applied by the caller, so a loss that needs only the
response's log-probs never computes the prompt's.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rlvr_jax import packing
from rlvr_jax.config import ModelConfig
from rlvr_jax.models.attention import attend, fused_attend  # noqa: F401
from rlvr_jax.models.kv_cache import KVCache, from_stacked, layers_of
from rlvr_jax.models.rope import apply_rope, positions_from_mask, rope_for


class RMSNorm(nn.Module):
    eps: float
    dtype: jnp.dtype
    param_dtype: jnp.dtype

    @nn.compact
    def __call__(self, x):
        scale = self.param("weight", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return x32.astype(self.dtype) * scale.astype(self.dtype).reshape((1,) * (x.ndim - 1) + (-1,))


def project(x, kernel, bias, dtype, sizes: tuple[int, ...] | None = None):
    """`x @ kernel (+ bias)` on x with its leading dimensions flattened; with `sizes`, the
    output split into consecutive blocks of those widths (a fused projection, below).

    Why flattened: the kernel gradient of a [B, T, D] x [D, F] product (a contraction over both
    B and T) ran about 2x slower than the same product on [B*T, D] (XLA:CPU)."""
    y = x.reshape(-1, x.shape[-1]).astype(dtype) @ kernel.astype(dtype)
    if bias is not None:
        y = y + bias.astype(dtype)[None, :]
    y = y.reshape(*x.shape[:-1], y.shape[-1])
    if sizes is None:
        return y
    return jnp.split(y, np.cumsum(sizes)[:-1], axis=-1)


class Linear(nn.Module):
    """One projection: params `kernel` [in, features] (and `bias`), product by `project`.

    With `lora_rank` r > 0, LoRA adapters (Hu et al. 2021, arXiv:2106.09685) `lora_a` [in, r]
    (Kaiming-uniform, as PEFT) and `lora_b` [r, features] (zeros) add `lora_scale * x A B`:
    the product of the adapted kernel W + lora_scale A B, without forming it. A tree without
    the adapters (the frozen base: the KL reference) runs the plain projection."""

    features: int
    use_bias: bool
    param_dtype: jnp.dtype
    dtype: jnp.dtype
    init_std: float
    lora_rank: int = 0
    lora_scale: float = 0.0

    @nn.compact
    def __call__(self, x, sizes: tuple[int, ...] | None = None):
        kernel = self.param("kernel", nn.initializers.normal(self.init_std),
                            (x.shape[-1], self.features), self.param_dtype)
        bias = (self.param("bias", nn.initializers.zeros, (self.features,), self.param_dtype)
                if self.use_bias else None)
        y = project(x, kernel, bias, self.dtype)
        if self.lora_rank and (self.is_initializing() or self.has_variable("params", "lora_a")):
            a = self.param("lora_a", nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform"),
                           (x.shape[-1], self.lora_rank), self.param_dtype)
            b = self.param("lora_b", nn.initializers.zeros, (self.lora_rank, self.features),
                           self.param_dtype)
            y = y + self.lora_scale * project(project(x, a, None, self.dtype), b, None,
                                              self.dtype)
        if sizes is None:
            return y
        return jnp.split(y, np.cumsum(sizes)[:-1], axis=-1)


def _linear(cfg: ModelConfig, features: int, bias: bool = False, name: str = "") -> Linear:
    """A projection of the model; `name` (its module name) in `model.lora_targets` gets
    adapters when `model.lora_rank` > 0."""
    rank = cfg.lora_rank if name in cfg.lora_targets else 0
    return Linear(features, bias, jnp.dtype(cfg.param_dtype), jnp.dtype(cfg.compute_dtype),
                  cfg.init_std, rank, cfg.lora_scale)


def qkv_sizes(cfg: ModelConfig) -> tuple[int, int, int]:
    """Widths of the q, k and v blocks of the fused `qkv_proj` output, in that order."""
    hd = cfg.resolved_head_dim
    return cfg.num_heads * hd, cfg.num_kv_heads * hd, cfg.num_kv_heads * hd


def gate_up_sizes(cfg: ModelConfig) -> tuple[int, int]:
    """Widths of the gate and up blocks of the fused `gate_up_proj` output, in that order."""
    return cfg.intermediate_size, cfg.intermediate_size


class Attention(nn.Module):
    cfg: ModelConfig

    def setup(self):
        cfg = self.cfg
        self.qkv_proj = _linear(cfg, sum(qkv_sizes(cfg)), cfg.qkv_bias, "qkv_proj")
        self.o_proj = _linear(cfg, cfg.hidden_size, name="o_proj")

    def qkv(self, x_B_T_D, rope_B_T):
        """Rotated queries [B, T, Q, H], rotated keys and values [B, T, K, H]."""
        cfg = self.cfg
        b, t, _ = x_B_T_D.shape
        hd = cfg.resolved_head_dim
        q, k, v = self.qkv_proj(x_B_T_D, qkv_sizes(cfg))
        q = apply_rope(q.reshape(b, t, cfg.num_heads, hd), *rope_B_T)
        k = apply_rope(k.reshape(b, t, cfg.num_kv_heads, hd), *rope_B_T)
        return q, k, v.reshape(b, t, cfg.num_kv_heads, hd)


class MLP(nn.Module):
    cfg: ModelConfig

    def setup(self):
        self.gate_up_proj = _linear(self.cfg, sum(gate_up_sizes(self.cfg)), name="gate_up_proj")
        self.down_proj = _linear(self.cfg, self.cfg.hidden_size, name="down_proj")

    def __call__(self, x):
        gate, up = self.gate_up_proj(x, gate_up_sizes(self.cfg))
        return self.down_proj(nn.silu(gate) * up)


# model.remat -> what the backward pass keeps of each block (nothing else is stored).
REMAT_POLICIES = {"full": jax.checkpoint_policies.nothing_saveable,
                  "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def rematerialised(body, remat: str):
    """A layer-scan body under `model.remat`'s checkpoint policy (unchanged for "none").
    prevent_cse is for unrolled code; a scan body needs none."""
    if remat == "none":
        return body
    return jax.checkpoint(body, policy=REMAT_POLICIES[remat], prevent_cse=False)


class Block(nn.Module):
    """Pre-norm block: `__call__` attends within its T tokens, `decode` over a cache."""

    cfg: ModelConfig

    def setup(self):
        cfg = self.cfg
        dt, pdt = jnp.dtype(cfg.compute_dtype), jnp.dtype(cfg.param_dtype)
        self.input_layernorm = RMSNorm(cfg.rms_norm_eps, dt, pdt)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.rms_norm_eps, dt, pdt)
        self.mlp = MLP(cfg)

    def _finish(self, x_B_T_D, attended_B_T_QH):
        x = x_B_T_D + self.self_attn.o_proj(attended_B_T_QH)
        return x + self.mlp(self.post_attention_layernorm(x))

    def __call__(self, x_B_T_D, rope_B_T, mask_B_T_T):
        """-> (x_B_T_D, (k_B_T_K_H, v_B_T_K_H)): the keys/values a prefill caches."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x_B_T_D), rope_B_T)
        return self._finish(x_B_T_D, fused_attend(q, k, v, mask_B_T_T)), (k, v)

    def cached(self, x_B_O_D, rope_B_O, k_B_S_K_H, v_B_S_K_H, mask_B_O_S, write, slots: int):
        """O new tokens per row over this layer's cache: their keys and values written into it
        first (`write(cache, new)`: each row's slots), then attending over its first `slots`
        slots under the mask, which covers the new tokens' own slots (the reference `attend`:
        a sampler's few tokens). Written before the read, the layer's buffer is updated in
        place: read first, XLA:CPU copied it to keep the value the read saw.
        -> (x_B_O_D, (keys, values)): the layer's updated cache."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x_B_O_D), rope_B_O)
        k_B_S_K_H, v_B_S_K_H = write(k_B_S_K_H, k), write(v_B_S_K_H, v)
        out = attend(q, k_B_S_K_H[:, :slots], v_B_S_K_H[:, :slots], mask_B_O_S)
        return self._finish(x_B_O_D, out), (k_B_S_K_H, v_B_S_K_H)

    def extend(self, x_B_O_D, rope_B_O, k_B_L_K_H, v_B_L_K_H, mask_B_O_LO):
        """Training's extend (`Decoder.forward_shared_prompt`): O tokens attend over L given
        keys and values (a prompt's) and causally over each other (`mask_B_O_LO` covers the
        L, then the O), through `fused_attend` (no scores kept for the backward pass where a
        fused kernel applies). -> (x_B_O_D, (k_B_O_K_H, v_B_O_K_H))."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x_B_O_D), rope_B_O)
        keys = jnp.concatenate([k_B_L_K_H, k.astype(k_B_L_K_H.dtype)], axis=1)
        values = jnp.concatenate([v_B_L_K_H, v.astype(v_B_L_K_H.dtype)], axis=1)
        return self._finish(x_B_O_D, fused_attend(q, keys, values, mask_B_O_LO)), (k, v)


def causal_mask(valid_B_T: jax.Array) -> jax.Array:
    """mask_B_T_T: query t sees keys s <= t that are real tokens."""
    t_T = jnp.arange(valid_B_T.shape[1])
    return (t_T[None, :] <= t_T[:, None])[None] & valid_B_T[:, None, :]


def _block_init(cfg: ModelConfig, key: jax.Array) -> dict:
    """One block's params (shapes from one token)."""
    hd = cfg.resolved_head_dim
    x = jnp.zeros((1, 1, cfg.hidden_size), jnp.dtype(cfg.compute_dtype))
    rope = (jnp.ones((1, 1, hd // 2), jnp.float32), jnp.zeros((1, 1, hd // 2), jnp.float32))
    return Block(cfg, parent=None).init(key, x, rope, jnp.ones((1, 1, 1), bool))["params"]


class Decoder(nn.Module):
    """The decoder. Its N blocks are one block's parameters stacked on a leading axis
    (`layers/...`, [N, ...]) and run by `lax.scan`: one block is compiled whatever the depth,
    and with `model.remat` the backward pass keeps only what the checkpoint policy saves of
    each block (the scan makes those residuals explicit on every backend)."""

    cfg: ModelConfig
    vocab_size: int

    def setup(self):
        cfg = self.cfg
        dt, pdt = jnp.dtype(cfg.compute_dtype), jnp.dtype(cfg.param_dtype)
        self.embed_tokens = nn.Embed(self.vocab_size, cfg.hidden_size, dtype=dt, param_dtype=pdt,
                                     embedding_init=nn.initializers.normal(cfg.init_std))
        # A variable, not `self.param`: param() checks a given tree against its initialiser's,
        # and the stack may come with or without LoRA adapters (the base alone: adapters off).
        self.stack = self.variable("params", "layers", lambda: jax.vmap(
            lambda k: _block_init(cfg, k))(jax.random.split(self.make_rng("params"),
                                                            cfg.num_layers)))
        self.norm = RMSNorm(cfg.rms_norm_eps, dt, pdt)
        if not cfg.tie_embeddings:
            self.lm_head = _linear(cfg, self.vocab_size, name="lm_head")

    def _blocks(self, x_B_T_D, rope_B_T, mask_B_T_T, remat: str = "none", keep_kv: bool = True):
        """Every block over T tokens -> (x_B_T_D, (k_N_B_T_K_H, v_N_B_T_K_H) or None)."""
        block = Block(self.cfg, parent=None)

        def body(x, params):
            x, kv = block.apply({"params": params}, x, rope_B_T, mask_B_T_T)
            return x, (kv if keep_kv else None)

        return jax.lax.scan(rematerialised(body, remat), x_B_T_D, self.stack.value)

    def forward(self, tokens_B_T, mask_B_T):
        """Final-normed hidden states [B, T, D] of left-padded rows (positions from each row's
        first real token, pad keys masked), blocks rematerialised as `model.remat` says."""
        valid_B_T = mask_B_T.astype(bool)
        rope_B_T = rope_for(self.cfg, positions_from_mask(valid_B_T))
        x, _ = self._blocks(self.embed_tokens(tokens_B_T), rope_B_T, causal_mask(valid_B_T),
                            self.cfg.remat, keep_kv=False)
        return self.norm(x)

    def forward_packed(self, tokens_K_C, valid_K_C, positions_K_C, unit_K_C, segment_K_C):
        """`forward` over packed rows (packing.py), each slot at its padded row's position: a
        token's hidden state is the one its padded row gives it, to float32 rounding."""
        x, _ = self._blocks(self.embed_tokens(tokens_K_C), rope_for(self.cfg, positions_K_C),
                            packing.attention_mask(valid_K_C, unit_K_C, segment_K_C),
                            self.cfg.remat, keep_kv=False)
        return self.norm(x)

    def response_hidden(self, tokens_B_T, mask_B_T, prompt_len: int, group_size: int = 1):
        """Hidden states [B, R, D] at slots L-1 .. T-2: those that predict the response tokens
        at L .. T-1 (the trainer's log-probs and values). `group_size` G > 1: the rows come in
        groups of G with one prompt (P_G order; the caller guarantees the prompts are equal)
        and each group's first L-1 prompt slots are computed once (`forward_shared_prompt`);
        the last prompt slot goes with the rows, whose first hidden state it gives."""
        if group_size == 1 or prompt_len == 1:
            return self.forward(tokens_B_T, mask_B_T)[:, prompt_len - 1: -1]
        cut = prompt_len - 1
        # Each group's first row, through a [P, G, T] view rather than a strided slice: a batch
        # sharded over more devices than it has groups then splits as (groups, rows of a
        # group), and the prompt is computed by the devices holding its rows.
        first = lambda x: x.reshape(-1, group_size, x.shape[-1])[:, 0, :cut]
        return self.forward_shared_prompt(first(tokens_B_T), first(mask_B_T),
                                          tokens_B_T[:, cut: -1], mask_B_T[:, cut: -1])

    def forward_shared_prompt(self, prompt_P_L, prompt_mask_P_L, tokens_B_R, mask_B_R):
        """`forward` over B = P x G rows that continue P prompts, G rows each (P_G order), each
        prompt computed once: -> the final-normed hidden states [B, R, D] of the rows' own
        tokens. In every layer the prompt's keys and values are computed for one row and
        broadcast to its G rows, whose tokens attend to them and causally to each other
        (`Block.extend`, fused). The same maths as `forward(prompt ++ tokens)[:, L:]`, with
        sums in another order; the prompt's gradient is the sum over its G rows (the
        broadcast's transpose). The update's FLOPs on the prompt fall by G (the prompt is a
        third of the GSM8K preset's positions: experiments/bench/efficiency.py)."""
        (p, l), (b, r) = prompt_mask_P_L.shape, mask_B_R.shape
        g = b // p
        valid_P_L, valid_B_R = prompt_mask_P_L.astype(bool), mask_B_R.astype(bool)
        per_row = lambda x: jnp.broadcast_to(x[:, None], (p, g, *x.shape[1:])).reshape(
            b, *x.shape[1:])
        # Positions continue the prompt's count of real tokens (forward's positions_from_mask
        # over the concatenation, computed in two parts).
        before_B = per_row(jnp.sum(valid_P_L.astype(jnp.int32), axis=-1))
        pos_B_R = jnp.maximum(before_B[:, None] + jnp.cumsum(valid_B_R.astype(jnp.int32), -1)
                              - 1, 0)
        rope_P_L = rope_for(self.cfg, positions_from_mask(valid_P_L))
        rope_B_R = rope_for(self.cfg, pos_B_R)
        mask_P_L_L = causal_mask(valid_P_L)
        mask_B_R_LR = jnp.concatenate([jnp.broadcast_to(per_row(valid_P_L)[:, None], (b, r, l)),
                                       causal_mask(valid_B_R)], axis=-1)
        block = Block(self.cfg, parent=None)

        def body(x, params):
            x_P_L_D, x_B_R_D = x
            x_P_L_D, (k_P_L_K_H, v_P_L_K_H) = block.apply({"params": params}, x_P_L_D,
                                                          rope_P_L, mask_P_L_L)
            x_B_R_D, _ = block.apply({"params": params}, x_B_R_D, rope_B_R, per_row(k_P_L_K_H),
                                     per_row(v_P_L_K_H), mask_B_R_LR, method="extend")
            return (x_P_L_D, x_B_R_D), None

        (_, x), _ = jax.lax.scan(rematerialised(body, self.cfg.remat),
                                 (self.embed_tokens(prompt_P_L), self.embed_tokens(tokens_B_R)),
                                 self.stack.value)
        return self.norm(x)

    def head(self, hidden_B_T_D):
        """Logits in float32, [..., V], at whatever positions the caller passes."""
        if self.cfg.tie_embeddings:
            logits = self.embed_tokens.attend(hidden_B_T_D)
        else:
            logits = self.lm_head(hidden_B_T_D)
        return logits.astype(jnp.float32)

    def logits(self, tokens_B_T, mask_B_T):
        """head(forward(...)): [B, T, V] float32 (tests, parity checks, initialisation)."""
        return self.head(self.forward(tokens_B_T, mask_B_T))

    def prefill(self, prompt_B_L, mask_B_L, slots: int, last_B=None):
        """Keys/values in slots 0 .. L-1 of a cache of `slots` slots, logits at the last slot
        (left-padded prompts) or at slot last_B[b] of row b: -> (logits_B_V, KVCache)."""
        valid_B_L = mask_B_L.astype(bool)
        rope_B_L = rope_for(self.cfg, positions_from_mask(valid_B_L))
        x, (k, v) = self._blocks(self.embed_tokens(prompt_B_L), rope_B_L, causal_mask(valid_B_L))
        pad = ((0, 0), (0, 0), (0, slots - prompt_B_L.shape[1]), (0, 0), (0, 0))
        cache = from_stacked(jnp.pad(k, pad), jnp.pad(v, pad), jnp.pad(valid_B_L, pad[1:3]))
        x_B_D = x[:, -1] if last_B is None else jnp.take_along_axis(
            x, last_B[:, None, None], 1)[:, 0]
        return self.head(self.norm(x_B_D)), cache

    def _over_cache(self, x, rope, cache: KVCache, valid_B_S, mask, write, slots: int):
        """Every block's `cached` step over new tokens `x`, one layer after the other, each on
        its own weights and cache buffers (models/kv_cache.py): -> (x, the updated KVCache
        with validity valid_B_S)."""
        block = Block(self.cfg, parent=None)
        ks, vs = [], []
        for params, k_B_S_K_H, v_B_S_K_H in zip(layers_of(self.stack.value, self.cfg.num_layers),
                                                cache.k_N_B_S_K_H, cache.v_N_B_S_K_H):
            x, (k, v) = block.apply({"params": params}, x, rope, k_B_S_K_H, v_B_S_K_H, mask,
                                    write, slots, method="cached")
            ks.append(k)
            vs.append(v)
        return x, KVCache(tuple(ks), tuple(vs), valid_B_S)

    def decode_step(self, token_B, valid_B, rope_B, cache: KVCache, index,
                    attend_slots: int | None = None):
        """One token per row into slot `index` (a traced int): -> (logits_B_V, cache).
        `valid_B` False marks a pad token (a finished row), which no later query attends to.
        `rope_B`: the (cos, sin) tables [B, D/2] at each row's position (`rope_for`).
        `attend_slots` (static): the query reads only the cache's first slots (the caller
        keeps index < attend_slots): attention's reads grow with the filled slots, not the
        cache's size (the sampler's phases, sampling.py)."""
        slots = attend_slots or cache.valid_B_S.shape[1]
        valid_B_S = jax.lax.dynamic_update_slice(cache.valid_B_S, valid_B[:, None], (0, index))
        mask_B_1_S = ((jnp.arange(slots) <= index)[None, :] & valid_B_S[:, :slots])[:, None, :]
        rope_B_1 = tuple(r[:, None, :] for r in rope_B)
        write = lambda c, new: jax.lax.dynamic_update_slice(c, new.astype(c.dtype),
                                                            (0, index, 0, 0))
        x, cache = self._over_cache(self.embed_tokens(token_B[:, None]), rope_B_1, cache,
                                    valid_B_S, mask_B_1_S, write, slots)
        return self.head(self.norm(x[:, 0])), cache

    def extend(self, tokens_B_O, valid_B_O, cache: KVCache, index_B, position_B):
        """O tokens per row into slots index_B + [0, O), each row at its own slot (a
        multi-turn episode's rows are at different points of their responses): a turn's
        sampled token (O = 1) or an environment's observation (O > 1), with no re-prefill of
        the history. New token j of row b is at position position_B[b] + j and attends to the
        valid cached slots below index_B[b] and causally to the valid new tokens before it.
        `valid_B_O` False marks padding (never attended to later). The caller keeps
        index_B + O <= S (dynamic_update_slice would otherwise move the write back).
        -> (normed hidden_B_O_D, cache); the head runs where the caller needs logits."""
        b, o = tokens_B_O.shape
        slots = cache.valid_B_S.shape[1]
        # Row b's O slots from index_B[b]: one scatter into each buffer as it is laid out (a
        # vmapped per-row dynamic_update_slice moved the whole cache rows-first and back).
        at = (jnp.arange(b)[:, None], index_B[:, None] + jnp.arange(o)[None, :])
        write = lambda c, new: c.at[at].set(new.astype(c.dtype), unique_indices=True)
        valid_B_S = write(cache.valid_B_S, valid_B_O.astype(bool))
        # New token j sees the slots before its row's index and the new ones up to its own.
        rel_B_1_S = jnp.arange(slots)[None, None, :] - index_B[:, None, None]
        mask_B_O_S = (rel_B_1_S <= jnp.arange(o)[None, :, None]) & valid_B_S[:, None, :]
        rope_B_O = rope_for(self.cfg, position_B[:, None] + jnp.arange(o)[None, :])
        x, cache = self._over_cache(self.embed_tokens(tokens_B_O), rope_B_O, cache, valid_B_S,
                                    mask_B_O_S, write, slots)
        return self.norm(x), cache


def init_params(model: Decoder, key: jax.Array) -> dict:
    """Fresh params, jitted (run eagerly, the initialisers dispatch op by op: ~5 s on CPU for
    a two-layer model, against ~1 s to compile)."""
    tokens = jnp.zeros((1, 2), jnp.int32)
    return jax.jit(lambda k: model.init(k, tokens, jnp.ones((1, 2), jnp.int32),
                                        method=Decoder.logits)["params"])(key)
