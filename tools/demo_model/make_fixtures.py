#!/usr/bin/env python3
"""Builds the strata_hybrid parity fixtures under tests/data/strata_hybrid_<name>/.

Needs torch + transformers 5.17 (tools/demo_model/README.md: the .venv-train
virtual environment); runs on the CPU in fp32 in a few seconds. For each
fixture it builds a small random StrataHybridForCausalLM (tools/demo_model/
strata_hybrid.py: transformers' own KDA, DSA and MoE modules), rounds the
weights to the storage dtype, saves config.json + model.safetensors with the
checkpoint names Strata binds, reloads them through from_checkpoint (so the
reference uses exactly the stored values) and records:
  prompt.npy     int32 [T]: random ids in [3, vocab)
  logits.npy     float32 [T, vocab]: logits of every prompt position
  generate.npy   int32: prompt[:G] + 8 greedy tokens (full recompute per token)
  meta.json      versions, seeds, structure, index_topk, the smallest greedy
                 top-2 gap, and how far the logits move when the indexer
                 selects every key (dense MLA) instead.
Prompt lengths are above 128 and not multiples of 64, and index_topk is well
below them, so the sparse selection decides what the DSA layers read.

Usage: python3 tools/demo_model/make_fixtures.py --out tests/data [--only a]
"""
import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_hybrid as sh  # noqa: E402
import transformers  # noqa: E402

FIXTURES = {
    # Both mixer kinds and both FFN kinds, group-limited routing, fp32 storage.
    "a": dict(seed=11, T=203, G=150, dtype="float32", cfg=dict(
        vocab_size=384, hidden_size=64, num_hidden_layers=4,
        layer_types=["kda", "dsa", "kda", "dsa"],
        mlp_layer_types=["dense", "moe", "moe", "dense"],
        linear_num_heads=2, linear_head_dim=32,
        num_attention_heads=2, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=16, v_head_dim=16, index_n_heads=16, index_head_dim=32, index_topk=40,
        intermediate_size=160, moe_intermediate_size=48, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, n_group=4, topk_group=2,
        routed_scaling_factor=1.5, bos_token_id=0, eos_token_id=1, pad_token_id=2)),
    # DSA first, tied embeddings, bf16 storage, a different top-k and heads.
    "b": dict(seed=23, T=150, G=140, dtype="bfloat16", cfg=dict(
        vocab_size=320, hidden_size=48, num_hidden_layers=3,
        layer_types=["dsa", "kda", "dsa"],
        mlp_layer_types=["moe", "dense", "moe"],
        linear_num_heads=3, linear_head_dim=16,
        num_attention_heads=3, q_lora_rank=32, kv_lora_rank=24, qk_nope_head_dim=8,
        qk_rope_head_dim=8, v_head_dim=12, index_n_heads=12, index_head_dim=16, index_topk=56,
        intermediate_size=96, moe_intermediate_size=32, n_routed_experts=6,
        num_experts_per_tok=2, n_shared_experts=1, n_group=1, topk_group=1,
        norm_topk_prob=False, routed_scaling_factor=1.0, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=1, pad_token_id=2)),
}
GENERATE_STEPS = 8
# The indexer's k-th and (k+1)-th scores of every query must differ by this
# much (relative to the row's largest score): a key scores exactly zero when
# every indexer head's ReLU is zero, and a tie at the top-k boundary lets a
# correct implementation choose differently. Many indexer heads make zero
# scores rare; prompts are searched until the margin holds.
INDEX_MARGIN_MIN = 1e-5
PROMPT_TRIES = 40
INIT_STD = 0.08  # larger than training's 0.02 so every layer moves the logits


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


@torch.no_grad()
def index_margin(model, prompt):
    """Smallest relative gap between the k-th and (k+1)-th indexer score over
    every query with more than index_topk causal keys, all DSA layers; the
    scores are recomputed from the indexer's own modules as its forward does."""
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import apply_rotary_pos_emb
    worst = [float("inf")]

    def hook(mod, args, kwargs, out):
        x, q_resid, (cos, sin) = args[0], args[1], args[2]
        B, S, _ = x.shape
        r = mod.qk_rope_head_dim
        q = mod.wq_b(q_resid).view(B, S, mod.n_heads, mod.head_dim)
        k = mod.k_norm(mod.wk(x)).unsqueeze(2)
        qr, kr = apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin, unsqueeze_dim=2)
        q = torch.cat([qr, q[..., r:]], -1).float()
        k = torch.cat([kr, k[..., r:]], -1).squeeze(2).float()
        sc = torch.relu(torch.matmul(q, k.transpose(-1, -2).unsqueeze(1)) * mod.softmax_scale)
        w = mod.weights_proj(x).float() * mod.n_heads ** -0.5
        idx = torch.matmul(w.unsqueeze(-2), sc).squeeze(-2)[0]
        for s in range(mod.index_topk, S):
            row = torch.sort(idx[s, : s + 1], descending=True).values
            gap = float(row[mod.index_topk - 1] - row[mod.index_topk])
            worst[0] = min(worst[0], gap / max(float(row.abs().max()), 1e-30))

    handles = [layer.self_attn.indexer.register_forward_hook(hook, with_kwargs=True)
               for layer in model.model.layers if layer.kind == "dsa"]
    model(prompt.view(1, -1))
    for h in handles:
        h.remove()
    return worst[0]


def build(name, spec, out_root):
    torch.manual_seed(spec["seed"])
    cfg = sh.make_config(**spec["cfg"])
    model = sh.StrataHybridForCausalLM(cfg).float().eval()
    sh.init_weights(model, spec["seed"], std=INIT_STD)
    # Non-trivial norms, conv, gates and selection bias (a unit weight would
    # hide a wrong epsilon or a skipped scale).
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in pname):
                p.mul_(1 + 0.2 * torch.randn(p.shape, generator=g))
                if pname.endswith("k_norm.bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
            if pname.endswith("conv1d.weight"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
        for bname, b in model.named_buffers():
            if bname.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=g))
    out = os.path.join(out_root, f"strata_hybrid_{name}")
    dtype = getattr(torch, spec["dtype"])
    sh.save_checkpoint(model, out, dtype=dtype)
    # The reference is the saved checkpoint itself, upcast to fp32.
    model = sh.load_checkpoint(out, dtype=torch.float32).eval()

    T, V = spec["T"], cfg["vocab_size"]
    assert T > 128 and T % 64 != 0 and cfg["index_topk"] * 2 < T
    for attempt in range(PROMPT_TRIES):
        prompt = torch.randint(3, V, (T,),
                               generator=torch.Generator().manual_seed(spec["seed"] + 2 + attempt))
        margin = index_margin(model, prompt)
        if margin >= INDEX_MARGIN_MIN:
            break
    else:
        raise SystemExit(f"{name}: no prompt with an indexer margin >= {INDEX_MARGIN_MIN}")
    with torch.no_grad():
        logits = model(prompt.view(1, T))[0].float()
        seq = prompt[: spec["G"]].clone()
        gaps = []
        for _ in range(GENERATE_STEPS):
            row = model(seq.view(1, -1))[0, -1]
            top2 = torch.topk(row, 2).values
            gaps.append(float((top2[0] - top2[1]) / row.abs().max()))
            seq = torch.cat([seq, row.argmax().view(1)])
        # Dense MLA instead of the indexer's selection: how far the logits move.
        keep = {}
        for i, layer in enumerate(model.model.layers):
            if layer.kind == "dsa":
                keep[i] = layer.self_attn.indexer.index_topk
                layer.self_attn.indexer.index_topk = 1 << 30
        dense = model(prompt.view(1, T))[0].float()
        for i, k in keep.items():
            model.model.layers[i].self_attn.indexer.index_topk = k
    dense_rel = float((dense - logits).norm() / logits.norm())
    assert dense_rel > 1e-2, f"{name}: the indexer's selection barely matters ({dense_rel})"

    np.save(os.path.join(out, "prompt.npy"), prompt.numpy().astype(np.int32))
    np.save(os.path.join(out, "logits.npy"), logits.numpy().astype(np.float32))
    np.save(os.path.join(out, "generate.npy"), seq.numpy().astype(np.int32))
    meta = {
        "generator": "tools/demo_model/make_fixtures.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "seed": spec["seed"], "storage_dtype": spec["dtype"], "init_std": INIT_STD,
        "spec": {"T": T, "index_topk": cfg["index_topk"], "layer_types": cfg["layer_types"],
                 "mlp_layer_types": cfg["mlp_layer_types"]},
        "generate": {"prompt_len": spec["G"], "steps": GENERATE_STEPS,
                     "min_greedy_gap_rel": min(gaps)},
        "dense_mla_logits_rel_diff": dense_rel,
        "index_margin_min": margin, "prompt_attempt": attempt,
        "modules": sorted({type(m).__name__ for m in model.modules()
                           if type(m).__module__.startswith("transformers.")}),
        "parameters": sh.count_parameters(model),
    }
    meta["sha256"] = {f: sha256(os.path.join(out, f)) for f in sorted(os.listdir(out))
                      if f != "meta.json"}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"{out}: T={T} topk={cfg['index_topk']} params={meta['parameters']} "
          f"dense_rel={dense_rel:.3g} min_gap={min(gaps):.3g} index_margin={margin:.3g} "
          f"(prompt attempt {attempt})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = args.only.split(",") if args.only else sorted(FIXTURES)
    for n in names:
        build(n, FIXTURES[n], args.out)


if __name__ == "__main__":
    main()
