"""strata_hybrid: the project's own small KDA + DSA hybrid, defined in PyTorch.

This file is the parity reference for src/model/models/strata_hybrid.cc. It
does not re-implement any layer: each decoder layer is built from the modules
transformers ships (5.17):
  * token mixer "kda": KimiLinearDeltaAttention (Kimi Delta Attention: short
    conv, per-channel forget gate, delta rule, gated RMSNorm output);
  * token mixer "dsa": DeepseekV32Attention (MLA with a low-rank query and
    interleaved RoPE, its lightning indexer choosing index_topk past tokens);
  * feed-forward "dense": DeepseekV32MLP; "moe": DeepseekV32MoE (sigmoid
    router with a selection bias, group-limited top-k, shared experts);
  * norms DeepseekV32RMSNorm, rotary tables DeepseekV32RotaryEmbedding.
Only the decoder skeleton (embedding, pre-norm residual blocks, final norm,
lm_head) and the causal mask are written here.

Checkpoints use the original names of the two source models (what Strata's
adapter binds): Moonshot's for KDA layers (q_conv1d/k_conv1d/v_conv1d,
f_a_proj, f_b_proj, A_log, dt_bias at the attention level) and DeepSeek's for
DSA layers and FFNs (per-expert mlp.experts.{e}.{gate,up,down}_proj).
`to_checkpoint` / `from_checkpoint` convert between them and the modules'
own parameter layout.
"""
import json
import os

import torch
from torch import nn

from transformers import DeepseekV32Config, KimiLinearConfig
from transformers.models.deepseek_v32.modeling_deepseek_v32 import (
    DeepseekV32Attention,
    DeepseekV32MLP,
    DeepseekV32MoE,
    DeepseekV32RMSNorm,
    DeepseekV32RotaryEmbedding,
)
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

# Re-exported: the training and fixture scripts use them as sh.make_config etc.
from strata_hybrid_config import CONFIG_KEYS, MODEL_TYPE, load_config, make_config  # noqa: F401


def _sub_configs(cfg, attn_implementation="eager"):
    """The transformers configs the layer modules are built from."""
    L = cfg["num_hidden_layers"]
    common = dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                  num_hidden_layers=L, rms_norm_eps=cfg["rms_norm_eps"], hidden_act="silu",
                  initializer_range=cfg["initializer_range"], pad_token_id=cfg["pad_token_id"],
                  bos_token_id=cfg["bos_token_id"], eos_token_id=cfg["eos_token_id"])
    kimi = KimiLinearConfig(
        **common,
        layer_types=["linear_attention" if t == "kda" else "full_attention"
                     for t in cfg["layer_types"]],
        mlp_layer_types=["sparse" if t == "moe" else "dense" for t in cfg["mlp_layer_types"]],
        linear_num_heads=cfg["linear_num_heads"], linear_head_dim=cfg["linear_head_dim"],
        linear_conv_kernel_dim=cfg["linear_conv_kernel_dim"])
    ds = DeepseekV32Config(
        **common,
        mlp_layer_types=["sparse" if t == "moe" else "dense" for t in cfg["mlp_layer_types"]],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_attention_heads"],
        q_lora_rank=cfg["q_lora_rank"], kv_lora_rank=cfg["kv_lora_rank"],
        qk_nope_head_dim=cfg["qk_nope_head_dim"], qk_rope_head_dim=cfg["qk_rope_head_dim"],
        v_head_dim=cfg["v_head_dim"],
        rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]},
        max_position_embeddings=cfg["max_position_embeddings"],
        index_n_heads=cfg["index_n_heads"], index_head_dim=cfg["index_head_dim"],
        index_topk=cfg["index_topk"],
        intermediate_size=cfg["intermediate_size"],
        moe_intermediate_size=cfg["moe_intermediate_size"],
        n_routed_experts=cfg["n_routed_experts"], num_experts_per_tok=cfg["num_experts_per_tok"],
        n_shared_experts=cfg["n_shared_experts"], n_group=cfg["n_group"],
        topk_group=cfg["topk_group"], norm_topk_prob=cfg["norm_topk_prob"],
        routed_scaling_factor=cfg["routed_scaling_factor"])
    for c in (kimi, ds):
        c._attn_implementation = attn_implementation
    return kimi, ds


class StrataHybridLayer(nn.Module):
    """Pre-norm residual block: x + mixer(norm(x)), then x + ffn(norm(x))."""

    def __init__(self, cfg, kimi, ds, i):
        super().__init__()
        self.kind = cfg["layer_types"][i]
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = DeepseekV32RMSNorm(D, eps)
        self.post_attention_layernorm = DeepseekV32RMSNorm(D, eps)
        if self.kind == "kda":
            self.self_attn = KimiLinearDeltaAttention(kimi, i)
        else:
            self.self_attn = DeepseekV32Attention(ds, i)
        self.mlp = DeepseekV32MoE(ds) if cfg["mlp_layer_types"][i] == "moe" else DeepseekV32MLP(ds)

    def forward(self, h, position_embeddings, mask):
        x = self.input_layernorm(h)
        if self.kind == "kda":
            x = self.self_attn(hidden_states=x)
        else:
            x, _ = self.self_attn(hidden_states=x, position_embeddings=position_embeddings,
                                  attention_mask=mask)
        h = h + x
        return h + self.mlp(self.post_attention_layernorm(h))


class StrataHybridModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        kimi, ds = _sub_configs(cfg)
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(StrataHybridLayer(cfg, kimi, ds, i)
                                    for i in range(cfg["num_hidden_layers"]))
        self.norm = DeepseekV32RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.rotary_emb = DeepseekV32RotaryEmbedding(config=ds)


class StrataHybridForCausalLM(nn.Module):
    """Full-sequence forward only (no cache): training, evaluation by
    re-running the prefix, and parity references all use it."""

    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        self.model = StrataHybridModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg["tie_word_embeddings"]:
            self.lm_head.weight = self.model.embed_tokens.weight

    def hidden_states(self, input_ids, return_layers=False):
        B, T = input_ids.shape
        h = self.model.embed_tokens(input_ids)
        pos = torch.arange(T, device=input_ids.device).unsqueeze(0).expand(B, T)
        pe = self.model.rotary_emb(h, position_ids=pos)
        # Additive causal mask [B, 1, T, T] (0 allowed, dtype minimum masked),
        # the form transformers' eager path builds; the DSA indexer reads it too.
        allowed = torch.ones(T, T, dtype=torch.bool, device=h.device).tril()
        mask = torch.zeros(T, T, dtype=h.dtype, device=h.device)
        mask = mask.masked_fill(~allowed, torch.finfo(h.dtype).min)
        mask = mask.view(1, 1, T, T).expand(B, 1, T, T)
        layers = []
        for layer in self.model.layers:
            h = layer(h, pe, mask)
            if return_layers:
                layers.append(h)
        h = self.model.norm(h)
        return (h, layers) if return_layers else h

    def forward(self, input_ids):
        return self.lm_head(self.hidden_states(input_ids))


def init_weights(model, seed, std=None):
    """Random initialisation in the spirit of the source models' own
    _init_weights (normal matrices, unit norms, FLA's A_log / dt_bias)."""
    cfg = model.config
    std = cfg["initializer_range"] if std is None else std
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 16.0, generator=g).log())
            elif name.endswith("dt_bias"):
                dt = torch.exp(torch.empty(p.shape).uniform_(
                    torch.log(torch.tensor(1e-3)).item(), torch.log(torch.tensor(1e-1)).item(),
                    generator=g)).clamp_min(1e-4)
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif p.dim() == 1:
                p.fill_(1.0)  # RMSNorm / LayerNorm weights
                if name.endswith("k_norm.bias"):
                    p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            b.zero_()


# ----------------------------------------------------------------------------
# Checkpoint names

def to_checkpoint(model):
    """The module state as {original checkpoint name: tensor}."""
    cfg = model.config
    out = {}
    sd = model.state_dict()
    C = cfg["linear_num_heads"] * cfg["linear_head_dim"]
    for name, t in sd.items():
        if "rotary_emb" in name:
            continue
        if name == "lm_head.weight" and cfg["tie_word_embeddings"]:
            continue
        if name.endswith("self_attn.conv1d.weight"):
            p = name[: -len("conv1d.weight")]
            for j, part in enumerate(("q", "k", "v")):
                out[f"{p}{part}_conv1d.weight"] = t[j * C:(j + 1) * C].contiguous()
            continue
        if ".self_attn.forget_gate." in name:
            out[name.replace(".forget_gate.", ".")] = t
            continue
        if name.endswith("mlp.experts.gate_up_proj"):
            p = name[: -len("gate_up_proj")]
            I = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{p}{e}.gate_proj.weight"] = t[e, :I].contiguous()
                out[f"{p}{e}.up_proj.weight"] = t[e, I:].contiguous()
            continue
        if name.endswith("mlp.experts.down_proj"):
            p = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{p}{e}.down_proj.weight"] = t[e].contiguous()
            continue
        out[name] = t
    return out


def from_checkpoint(model, tensors):
    """Loads {checkpoint name: tensor} into the modules; every parameter and
    persistent buffer must be covered and every tensor used."""
    cfg = model.config
    sd = model.state_dict()
    used = set()
    new = {}
    for name, ref in sd.items():
        if "rotary_emb" in name:
            continue
        if name == "lm_head.weight" and cfg["tie_word_embeddings"] and name not in tensors:
            continue
        if name.endswith("self_attn.conv1d.weight"):
            p = name[: -len("conv1d.weight")]
            keys = [f"{p}{x}_conv1d.weight" for x in ("q", "k", "v")]
            new[name] = torch.cat([tensors[k] for k in keys], 0)
        elif ".self_attn.forget_gate." in name:
            keys = [name.replace(".forget_gate.", ".")]
            new[name] = tensors[keys[0]]
        elif name.endswith("mlp.experts.gate_up_proj"):
            p = name[: -len("gate_up_proj")]
            E = ref.shape[0]
            keys = [f"{p}{e}.{w}.weight" for e in range(E) for w in ("gate_proj", "up_proj")]
            new[name] = torch.stack([torch.cat([tensors[f"{p}{e}.gate_proj.weight"],
                                                tensors[f"{p}{e}.up_proj.weight"]], 0)
                                     for e in range(E)])
        elif name.endswith("mlp.experts.down_proj"):
            p = name[: -len("down_proj")]
            keys = [f"{p}{e}.down_proj.weight" for e in range(ref.shape[0])]
            new[name] = torch.stack([tensors[k] for k in keys])
        else:
            keys = [name]
            new[name] = tensors[name]
        used.update(keys)
        if tuple(new[name].shape) != tuple(ref.shape):
            raise ValueError(f"{name}: checkpoint shape {tuple(new[name].shape)} "
                             f"!= module shape {tuple(ref.shape)}")
    unused = set(tensors) - used
    if unused:
        raise ValueError(f"checkpoint tensors not used: {sorted(unused)[:8]}")
    with torch.no_grad():
        for name, t in new.items():
            sd[name].copy_(t.to(sd[name].dtype))


def save_checkpoint(model, out_dir, dtype=torch.float32, max_shard_bytes=0):
    """config.json + the weights (matrices in `dtype`, the MoE selection bias
    always fp32 as DeepSeek stores it): one model.safetensors, or with
    max_shard_bytes > 0 shards of at most that size plus
    model.safetensors.index.json (the device machine returns files of at most
    16 MiB)."""
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(out_dir):
        if f.startswith("model") and (f.endswith(".safetensors") or f.endswith(".index.json")):
            os.remove(os.path.join(out_dir, f))
    tensors = {}
    for k, v in to_checkpoint(model).items():
        keep32 = k.endswith("e_score_correction_bias")
        tensors[k] = v.detach().to("cpu", torch.float32 if keep32 else dtype).contiguous()
    shards, size = [{}], 0
    for k in sorted(tensors):
        n = tensors[k].numel() * tensors[k].element_size()
        if max_shard_bytes and shards[-1] and size + n > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][k] = tensors[k]
        size += n
    if len(shards) == 1:
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            save_file(shard, os.path.join(out_dir, name), metadata={"format": "pt"})
            weight_map.update({k: name for k in shard})
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.config, f, indent=2)
        f.write("\n")
    return tensors


def read_weights(model_dir):
    """{name: tensor} of model.safetensors or of every shard its index names."""
    from safetensors.torch import load_file
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_file(os.path.join(model_dir, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    out = {}
    for name in files:
        out.update(load_file(os.path.join(model_dir, name)))
    return out


def load_checkpoint(model_dir, dtype=torch.float32, device="cpu"):
    cfg = load_config(os.path.join(model_dir, "config.json"))
    model = StrataHybridForCausalLM(cfg)
    from_checkpoint(model, {k: v.float() for k, v in read_weights(model_dir).items()})
    return model.to(device=device, dtype=dtype)


def count_parameters(model):
    seen = set()
    n = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n
