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

GPU-parity fixtures (names starting with "g"; "gpu": true in meta.json's
spec) are built for bf16 execution as tools/reference/make_dsv32_fixtures.py
builds dsv32_g1/g2, with its fitting code: bf16-exact weights, power-of-two
norm weights, gentle mixer-output and FFN-down gains and a wider lm_head;
every indexer fitted so the k-th vs (k+1)-th score gap is at least 2e-2 of the
row's largest score and every router so expert and group choices have gaps of
at least 5e-2, over the prompt and the greedy continuation; greedy top-2 gaps
of at least 0.1; and the reference's own bf16 error recorded
(bf16_floor_l2_rel, required at most 5e-3).

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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import make_dsv32_fixtures as d32  # noqa: E402  (the bf16 fitting, probes and margins)
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
    # GPU parity (bf16 margins): odd head counts, KDA between two DSA layers,
    # group-limited routing with 2 of 4 groups kept, bf16 storage.
    "g1": dict(seed=37, T=170, G=150, dtype="bfloat16", gpu=dict(
        o_gain=0.25, ffn_gain=0.06, lm_head_gain=5.0), cfg=dict(
        vocab_size=320, hidden_size=96, num_hidden_layers=3,
        layer_types=["dsa", "kda", "dsa"],
        mlp_layer_types=["dense", "moe", "moe"],
        linear_num_heads=3, linear_head_dim=32,
        num_attention_heads=3, q_lora_rank=64, kv_lora_rank=48, qk_nope_head_dim=32,
        qk_rope_head_dim=16, v_head_dim=32, index_n_heads=9, index_head_dim=32, index_topk=40,
        intermediate_size=160, moe_intermediate_size=32, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, n_group=4, topk_group=2,
        routed_scaling_factor=1.0, bos_token_id=0, eos_token_id=1, pad_token_id=2)),
}
GENERATE_STEPS = 8
# The indexer's k-th and (k+1)-th scores of every query must differ by this
# much (relative to the row's largest score): a key scores exactly zero when
# every indexer head's ReLU is zero, and a tie at the top-k boundary lets a
# correct implementation choose differently. Many indexer heads make zero
# scores rare; prompts are searched until the margin holds.
INDEX_MARGIN_MIN = 1e-5
PROMPT_TRIES = 40
SENSITIVITY_MIN = 1e-2  # tests/harness/parity.h kMinSensitivity
# The reference's own bf16 error a GPU fixture may have. The GPU test bounds
# its error by max(1e-2, 1.25 x this floor), so up to 6e-3 the bound stays
# 1e-2 with 1.6x headroom over bf16 itself; dsv32's 5e-3 leaves no gain at
# which every layer also moves the logits by SENSITIVITY_MIN here (the
# hybrid's KDA layers add their own rounding).
GPU_FLOOR_MAX = 6e-3
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


def run_logits(model, ids):
    """Every position's logits of one full-sequence forward (d32's `run` hook)."""
    with torch.no_grad():
        return model(ids)[0].float()


def greedy_recompute(model, ids, k):
    """k greedy tokens after `ids` [1, S] by full recompute, and each step's absolute
    top-1 minus top-2 logit gap (d32's `greedy` hook)."""
    toks, gaps, seq = [], [], ids
    with torch.no_grad():
        for _ in range(k):
            row = model(seq)[0, -1].float()
            top2 = torch.topk(row, 2)
            gaps.append(float(top2.values[0] - top2.values[1]))
            toks.append(int(top2.indices[0]))
            seq = torch.cat([seq, top2.indices[:1].view(1, 1)], 1)
    return toks, gaps


def shape_for_bf16(model, gains, g):
    """GPU fixtures: norm weights 0.5 / 1 / 2 (a bf16 product with them is exact),
    unit-variance embeddings, fan-in scaled matrices with gentler mixer outputs and FFN
    down projections and a wider lm_head, as d32.init_weights sets them."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1 and pname.endswith("norm.weight"):
                p.copy_(2.0 ** torch.randint(-1, 2, p.shape, generator=g).float())
            elif "embed_tokens" in pname:
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                gain = 1.0
                if pname.endswith("o_proj.weight"):
                    gain = gains["o_gain"]
                elif pname.endswith("down_proj.weight"):
                    gain = gains["ffn_gain"]
                elif pname == "lm_head.weight":
                    gain = gains["lm_head_gain"]
                p.copy_(torch.randn(p.shape, generator=g) * (gain / p.shape[1] ** 0.5))
            elif pname.endswith("mlp.experts.down_proj"):
                p.copy_(torch.randn(p.shape, generator=g) * (gains["ffn_gain"] / p.shape[-1] ** 0.5))
            elif pname.endswith("mlp.experts.gate_up_proj"):
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def fit_spec(name, spec, cfg):
    """The keys d32's fitting reads."""
    return dict(name=name, seed=spec["seed"], experts=cfg["n_routed_experts"],
                n_group=cfg["n_group"], gen_new=GENERATE_STEPS, **spec["gpu"])


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
    T, V = spec["T"], cfg["vocab_size"]
    gpu = "gpu" in spec
    fit = None
    if gpu:
        shape_for_bf16(model, spec["gpu"], g)
        d32.round_to_bf16_values(model)
        prompt = torch.randint(3, V, (T,), generator=torch.Generator().manual_seed(spec["seed"] + 2))
        ids = prompt.view(1, T)
        fit = d32.fit_for_bf16(model, fit_spec(name, spec, cfg), ids, ids[:, : spec["G"]], 0, name,
                               run_logits, greedy_recompute)
    out = os.path.join(out_root, f"strata_hybrid_{name}")
    dtype = getattr(torch, spec["dtype"])
    sh.save_checkpoint(model, out, dtype=dtype)
    # The reference is the saved checkpoint itself, upcast to fp32.
    model = sh.load_checkpoint(out, dtype=torch.float32).eval()

    assert T > 128 and T % 64 != 0 and cfg["index_topk"] * 2 < T
    for attempt in range(1 if gpu else PROMPT_TRIES):
        if gpu:  # the prompt the indexers and routers were fitted to
            margin = index_margin(model, prompt)
            break
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
        gaps, row_max = [], []
        for _ in range(GENERATE_STEPS):
            row = model(seq.view(1, -1))[0, -1]
            top2 = torch.topk(row, 2).values
            row_max.append(float(row.abs().max()))
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
    gpu_meta = {}
    if gpu:
        # The CPU parity test's check: each layer's mixer output x1.1 moves the
        # logits by more than SENSITIVITY_MIN (100x its tolerance).
        sens = []
        for layer in model.model.layers:
            w = layer.self_attn.o_proj.weight
            with torch.no_grad():
                w.mul_(1.1)
                moved = model(prompt.view(1, T))[0].float()
                w.div_(1.1)
            sens.append(float((moved - logits).norm() / logits.norm()))
        if min(sens) <= SENSITIVITY_MIN:
            raise SystemExit(f"{name}: a layer barely moves the logits: {sens}")
        fs = fit_spec(name, spec, cfg)
        ids = prompt.view(1, T)
        margins, new_tokens, abs_gaps = d32.gpu_margins(model, fs, ids, ids[:, : spec["G"]],
                                                        run_logits, greedy_recompute)
        assert new_tokens == seq[spec["G"]:].tolist(), (new_tokens, seq[spec["G"]:])
        if not d32.gpu_margins_ok(margins, abs_gaps):
            raise SystemExit(f"{name}: bf16 margins not reached: {d32.worst_margins(margins)}, "
                             f"greedy gaps {abs_gaps}")
        bf = sh.load_checkpoint(out, dtype=torch.bfloat16).eval()
        with torch.no_grad():
            lb = bf(prompt.view(1, T))[0].float()
        floor = float((lb - logits).norm() / logits.norm())
        if floor > GPU_FLOOR_MAX:
            raise SystemExit(f"{name}: the reference's own bf16 error {floor:.4g} exceeds "
                             f"{GPU_FLOOR_MAX}")
        gpu_meta = {
            "bf16_floor_l2_rel": floor,
            "bf16_floor": {
                "what": "tools/demo_model/strata_hybrid.py load_checkpoint(fixture dir, "
                        "dtype=torch.bfloat16), full-prompt logits vs logits.npy (fp32), CPU",
                "argmax_agree": float((lb.argmax(1) == logits.argmax(1)).float().mean()),
                "required_max": GPU_FLOOR_MAX},
            "margins": {**margins, "worst": d32.worst_margins(margins),
                        "greedy_gap_min": min(abs_gaps),
                        "thresholds": {"index": d32.GPU_INDEX_MARGIN_MIN,
                                       "routing": d32.GPU_ROUTING_MARGIN_MIN,
                                       "group": d32.GPU_ROUTING_MARGIN_MIN,
                                       "greedy_gap": d32.GPU_GREEDY_GAP_MIN},
                        "note": "as dsv32_g1's meta.json: relative to the row's largest |value|"},
            "fit": fit,
            "o_proj_x1.1_logit_change": sens,
        }

    np.save(os.path.join(out, "prompt.npy"), prompt.numpy().astype(np.int32))
    np.save(os.path.join(out, "logits.npy"), logits.numpy().astype(np.float32))
    np.save(os.path.join(out, "generate.npy"), seq.numpy().astype(np.int32))
    meta = {
        "generator": "tools/demo_model/make_fixtures.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "seed": spec["seed"], "storage_dtype": spec["dtype"], "init_std": INIT_STD,
        "spec": {"T": T, "index_topk": cfg["index_topk"], "layer_types": cfg["layer_types"],
                 "mlp_layer_types": cfg["mlp_layer_types"], "layers": cfg["num_hidden_layers"],
                 "gpu": gpu},
        "generate": {"prompt_len": spec["G"], "steps": GENERATE_STEPS,
                     "min_greedy_gap_rel": min(gaps),
                     "top1_top2_gaps": [g * m for g, m in zip(gaps, row_max)]},
        "dense_mla_logits_rel_diff": dense_rel,
        "index_margin_min": margin, "prompt_attempt": attempt,
        "modules": sorted({type(m).__name__ for m in model.modules()
                           if type(m).__module__.startswith("transformers.")}),
        "parameters": sh.count_parameters(model),
        **gpu_meta,
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
