#!/usr/bin/env python3
"""Trains the strata_hybrid demo model (tools/demo_model/strata_hybrid.py).

Seeded and resumable: every --save-every steps and at the end of a run it
writes OUT/ckpt.pt (weights, optimizer, step, data and RNG state) and the
Strata model directory OUT/model/ (config.json, model.safetensors in bf16
with the checkpoint names Strata binds, tokenizer files). A new run with the
same OUT continues from ckpt.pt; --minutes bounds one run's wall time (10 on
the H200), --total-steps is the length of the whole schedule (warmup, cosine
decay) across runs, so a resumed run continues the same curve.

Losses: next-token cross-entropy on the masked targets (assistant turns,
plain text; prepare_data.py). The lightning indexer is not trained by the
language-model loss (transformers runs it under no_grad, as DeepSeek's
inference does); like DeepSeek-V3.2's dense warm-up, attention stays dense
during training (index_topk >= the training length) and each DSA layer's
indexer learns, through a KL term, to predict the distribution of the main
attention (summed over heads, detached). MoE routing is balanced without an
auxiliary loss, DeepSeek-V3 style: after each step every router's selection
bias moves by --bias-rate toward under-used experts.

Usage (H200): python3 train.py --data D --tokenizer TOK --out OUT --minutes 9
Smoke test (CPU): python3 train.py ... --preset tiny --device cpu --max-steps 5
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_hybrid as sh  # noqa: E402
from transformers.models.deepseek_v32.modeling_deepseek_v32 import (  # noqa: E402
    DeepseekV32Attention, DeepseekV32TopkRouter, apply_rotary_pos_emb)

PRESETS = {
    # About 11 M parameters (tied embeddings), about 22 MB in bf16. Eight
    # indexer heads: a key scores exactly zero only when every head's ReLU is
    # zero, and such ties at the top-k boundary would make the selection (and
    # so Strata vs torch) ambiguous.
    "demo": dict(hidden_size=256, num_hidden_layers=6,
                 layer_types=["kda", "kda", "dsa", "kda", "kda", "dsa"],
                 mlp_layer_types=["dense", "moe", "dense", "moe", "dense", "moe"],
                 linear_num_heads=4, linear_head_dim=64,
                 num_attention_heads=4, q_lora_rank=128, kv_lora_rank=128,
                 qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32,
                 index_n_heads=8, index_head_dim=64, index_topk=256,
                 intermediate_size=768, moe_intermediate_size=256, n_routed_experts=8,
                 num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=2,
                 routed_scaling_factor=1.0, tie_word_embeddings=True,
                 max_position_embeddings=4096),
    # For CPU smoke tests only.
    "tiny": dict(hidden_size=64, num_hidden_layers=2, layer_types=["kda", "dsa"],
                 mlp_layer_types=["dense", "moe"], linear_num_heads=2, linear_head_dim=32,
                 num_attention_heads=2, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
                 qk_rope_head_dim=16, v_head_dim=16, index_n_heads=8, index_head_dim=32,
                 index_topk=32, intermediate_size=128, moe_intermediate_size=32,
                 n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1,
                 topk_group=1, tie_word_embeddings=True, max_position_embeddings=4096),
}


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="prepare_data.py output (tokens.npy, mask.npy)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--total-steps", type=int, default=6000,
                    help="length of the LR schedule; 0: as many steps as this run's --minutes "
                         "allow at the rate measured over its steps 10..30 (recorded in ckpt.pt "
                         "and training.json, so a resumed run keeps the same curve)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop this run after N steps (0: no)")
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-time budget of this run")
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--indexer-kl", type=float, default=0.1, help="weight of the indexer KL")
    ap.add_argument("--bias-rate", type=float, default=1e-3, help="MoE selection-bias step")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--init-from", default="",
                    help="start from the weights of an exported model directory (a new "
                         "machine without OUT/ckpt.pt: the optimizer state starts afresh)")
    ap.add_argument("--shard-mb", type=float, default=12.0,
                    help="largest safetensors shard of the export (0: one file)")
    return ap.parse_args()


class Batches:
    """Windows of seq_len + 1 tokens starting at random document starts."""

    def __init__(self, data_dir, seq_len, batch, seed):
        self.tokens = np.load(os.path.join(data_dir, "tokens.npy"), mmap_mode="r")
        self.mask = np.load(os.path.join(data_dir, "mask.npy"), mmap_mode="r")
        starts = np.load(os.path.join(data_dir, "starts.npy"))
        self.starts = starts[starts + seq_len + 1 <= len(self.tokens)]
        self.seq_len, self.batch = seq_len, batch
        self.rng = np.random.default_rng(seed)

    def next(self):
        idx = self.rng.integers(0, len(self.starts), self.batch)
        L = self.seq_len + 1
        x = np.stack([self.tokens[s:s + L] for s in self.starts[idx]]).astype(np.int64)
        m = np.stack([self.mask[s:s + L] for s in self.starts[idx]]).astype(np.float32)
        return torch.from_numpy(x), torch.from_numpy(m)


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = min(1.0, (step - a.warmup) / max(1, a.total_steps - a.warmup))
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * p))


class Probes:
    """Forward hooks: each DSA layer's inputs and attention probabilities (for
    the indexer KL) and each router's expert choices (for bias balancing)."""

    def __init__(self, model):
        self.attn, self.routes = [], []
        for m in model.modules():
            if isinstance(m, DeepseekV32Attention):
                m.register_forward_hook(self._attn_hook, with_kwargs=True)
            if isinstance(m, DeepseekV32TopkRouter):
                m.register_forward_hook(self._router_hook)

    def clear(self):
        self.attn.clear()
        self.routes.clear()

    def _attn_hook(self, mod, args, kwargs, out):
        self.attn.append((mod, kwargs["hidden_states"], kwargs["position_embeddings"],
                          kwargs["attention_mask"], out[1]))

    def _router_hook(self, mod, args, out):
        self.routes.append((mod, out[2]))


def indexer_kl(probes):
    """KL(main attention || indexer) per DSA layer, gradients into the indexer
    only. The indexer score of key t for query s is sum_h w_h·relu(q_h·k_t)
    (transformers' DeepseekV32Indexer.forward, recomputed here with grad)."""
    total = 0.0
    for attn, x, (cos, sin), mask, probs in probes.attn:
        if probs is None:
            raise RuntimeError("the DSA attention returned no probabilities (use eager)")
        idx = attn.indexer
        x = x.detach()
        B, S, _ = x.shape
        q_resid = attn.q_a_layernorm(attn.q_a_proj(x)).detach()
        q = idx.wq_b(q_resid).view(B, S, idx.n_heads, idx.head_dim)
        k = idx.k_norm(idx.wk(x)).unsqueeze(2)
        r = idx.qk_rope_head_dim
        q_rot, k_rot = apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin, unsqueeze_dim=2)
        q = torch.cat([q_rot, q[..., r:]], -1).float()
        k = torch.cat([k_rot, k[..., r:]], -1).squeeze(2).float()
        scores = F.relu(torch.einsum("bshd,btd->bsht", q, k) * idx.softmax_scale)
        w = idx.weights_proj(x).float() * idx.n_heads ** -0.5
        logits = torch.einsum("bsh,bsht->bst", w, scores) + mask[:, 0].float()
        logq = torch.log_softmax(logits, -1)
        p = probs.detach().float().sum(1)
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
        kl = (p * (torch.log(p.clamp_min(1e-9)) - logq)).masked_fill(p == 0, 0).sum(-1)
        total = total + kl.mean()
    return total


@torch.no_grad()
def balance_routers(probes, rate):
    for router, chosen in probes.routes:
        load = torch.bincount(chosen.flatten(), minlength=router.num_experts).float()
        router.e_score_correction_bias += rate * torch.sign(load.mean() - load)


def export(model, tok_dir, out_dir, tokens_seen, step, shard_mb, total_steps):
    sh.save_checkpoint(model, out_dir, dtype=torch.bfloat16,
                       max_shard_bytes=int(shard_mb * 1024 * 1024))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok_dir, f), os.path.join(out_dir, f))
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump({"tokens_seen": tokens_seen, "step": step, "total_steps": total_steps,
                   "parameters": sh.count_parameters(model)}, f)


def main():
    a = parse_args()
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.tokenizer, "tokenizer.json")) as f:
        tj = json.load(f)
    vocab = max(max(tj["model"]["vocab"].values()), max(t["id"] for t in tj["added_tokens"])) + 1
    ids = {t["content"]: t["id"] for t in tj["added_tokens"]}
    cfg = sh.make_config(vocab_size=vocab, bos_token_id=None, eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"], **PRESETS[a.preset])
    # Dense attention while training (see the module docstring); the exported
    # config keeps the sparse index_topk.
    train_cfg = dict(cfg, index_topk=max(cfg["index_topk"], a.seq_len))
    model = sh.StrataHybridForCausalLM(train_cfg)
    sh.init_weights(model, a.seed)
    model.config = cfg
    dev = torch.device(a.device)
    model.to(dev)
    n_params = sh.count_parameters(model)
    print(f"parameters: {n_params / 1e6:.2f} M ({2 * n_params / 1e6:.1f} MB in bf16)", flush=True)
    if n_params > 12e6:
        raise SystemExit("more than 12 M parameters")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    data = Batches(a.data, a.seq_len, a.batch, a.seed)
    step, tokens_seen = 0, 0
    ckpt_path = os.path.join(a.out, "ckpt.pt")
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location=dev, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, tokens_seen = ck["step"], ck["tokens_seen"]
        if a.total_steps == 0:
            a.total_steps = ck["args"]["total_steps"]
        data.rng.bit_generator.state = ck["data_rng"]
        torch.set_rng_state(ck["torch_rng"])
        print(f"resumed at step {step} ({tokens_seen / 1e6:.1f} M tokens)", flush=True)
    elif a.init_from:
        with open(os.path.join(a.init_from, "training.json")) as f:
            prev = json.load(f)
        sh.from_checkpoint(model, {k: v.float() for k, v in sh.read_weights(a.init_from).items()})
        step, tokens_seen = prev.get("step", 0), prev["tokens_seen"]
        print(f"initialised from {a.init_from} at step {step}", flush=True)

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "tokens_seen": tokens_seen, "data_rng": data.rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(), "args": vars(a)}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)
        export(model, a.tokenizer, os.path.join(a.out, "model"), tokens_seen, step, a.shard_mb,
               a.total_steps)

    probes = Probes(model)
    forward = torch.compile(model) if a.compile else model
    use_amp = dev.type == "cuda"
    t0 = time.time()
    run_steps = 0
    log = open(os.path.join(a.out, "train_log.jsonl"), "a")
    auto_steps = a.total_steps == 0
    if auto_steps:
        a.total_steps = 10**9  # fixed at run step 30; the warmup is longer than that
        assert a.warmup > 30
    t10 = None
    while step < a.total_steps:
        if a.max_steps and run_steps >= a.max_steps:
            break
        if time.time() - t0 > a.minutes * 60:
            break
        x, m = data.next()
        x, m = x.to(dev, non_blocking=True), m.to(dev, non_blocking=True)
        lr = lr_at(step, a)
        if a.init_from and run_steps < 50:
            lr *= (run_steps + 1) / 50  # fresh optimizer moments: warm up again
        for g in opt.param_groups:
            g["lr"] = lr
        probes.clear()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_amp):
            logits = forward(x[:, :-1])
            ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                 x[:, 1:].reshape(-1), reduction="none")
            tgt = m[:, 1:].reshape(-1)
            lm = (ce * tgt).sum() / tgt.sum().clamp_min(1)
            kl = indexer_kl(probes) if a.indexer_kl > 0 else torch.zeros((), device=dev)
            loss = lm + a.indexer_kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        balance_routers(probes, a.bias_rate)
        step += 1
        run_steps += 1
        tokens_seen += x.numel()
        if auto_steps and run_steps in (10, 30):
            torch.cuda.synchronize() if dev.type == "cuda" else None
            now = time.time()
            if run_steps == 10:
                t10 = now
            else:
                rate = 20 / (now - t10)
                left = a.minutes * 60 - (now - t0) - 30  # 30 s for the final save
                a.total_steps = step + max(1, int(rate * left))
                print(f"schedule: {rate:.2f} steps/s -> total_steps {a.total_steps}", flush=True)
        if step % 20 == 0 or run_steps <= 3:
            rec = {"step": step, "lm": round(lm.item(), 4), "indexer_kl": round(float(kl), 4),
                   "grad_norm": round(gn.item(), 3), "lr": lr_at(step, a),
                   "tokens": tokens_seen, "elapsed_s": round(time.time() - t0, 1)}
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
        if step % a.save_every == 0:
            save()
    save()
    print(f"saved step {step} ({tokens_seen / 1e6:.1f} M tokens) to {a.out} "
          f"after {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
