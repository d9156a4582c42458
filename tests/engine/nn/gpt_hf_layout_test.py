#!/usr/bin/env python3
"""Hugging Face GPT-2's weights layout, both ways, against transformers.

argv: gpt_logits, ampd_train. With transformers' GPT2LMHeadModel (a tiny
random config, biases and norms perturbed so none is trivial):

1. Its state_dict is written as a user's model.safetensors: the
   `transformer.` prefix, Conv1D [in, out] weights, `attn.bias` mask buffers,
   the tied `lm_head.weight` copy. A job with `init_from` that file trains
   through ampd_train on a one-window shard: its first step's loss equals the
   PyTorch model's loss on that window within 1e-5 (f32).
2. ampd_train's export (--weights_out) loads with GPT2LMHeadModel built from
   the config in its header (no missing or unexpected keys) and gives ampd's
   logits on a batch within 1e-5.
Exit 0 on success; prints "SKIPPED ..." and exits 3 without torch/transformers.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

V, T, L, H, C = 64, 16, 2, 2, 32


def write_shard(path, tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def main():
    gpt_logits, ampd_train = (os.path.abspath(a) for a in sys.argv[1:3])
    try:
        import torch
        import torch.nn.functional as F
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print("SKIPPED gpt_hf_layout_test: %s (python %s)" % (e, sys.executable))
        return 3
    torch.manual_seed(0)
    torch.set_num_threads(2)
    failures = []
    work = tempfile.mkdtemp()
    config = GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        activation_function="gelu_new", bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.05 * torch.randn_like(p))

    # 1. A user's file: every convention of the Hub's GPT-2 checkpoints.
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    for k in list(sd):
        if not k.startswith("transformer.") and k != "lm_head.weight":
            failures.append("unexpected state_dict key " + k)
    for i in range(L):
        sd["transformer.h.%d.attn.bias" % i] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    sd["lm_head.weight"] = sd["transformer.wte.weight"].clone()
    assert sd["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C)  # Conv1D [in, out]
    save_file(sd, os.path.join(work, "gpt2.safetensors"), metadata={"format": "pt"})

    tokens = torch.randint(0, V, (T + 1,), generator=torch.Generator().manual_seed(1)).tolist()
    write_shard(os.path.join(work, "train.bin"), tokens)
    write_shard(os.path.join(work, "val.bin"), tokens)
    spec = {
        "model": {"gpt": {"vocabSize": str(V), "blockSize": str(T), "nLayer": str(L),
                          "nHead": str(H), "nEmbd": str(C)}},
        "data": {"tokens": {"shards": {"train": ["train.bin"], "val": "val.bin"},
                            "evalWindows": "1"}},
        "initFrom": "gpt2.safetensors",
        "optimizer": {"lr": 0.001, "weightDecay": 0.0},
        "precision": {"profile": "32-true"},
        "training": {"steps": "3", "batchSize": "1", "evalInterval": "100", "seed": "3"},
    }
    with open(os.path.join(work, "spec.json"), "w") as f:
        json.dump(spec, f)
    run = subprocess.run([ampd_train, "--json", "--log_every=1",
                          "--weights_out=export.safetensors", "spec.json"],
                         cwd=work, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        return 1
    steps = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
    steps = [s for s in steps if s["type"] == "step"]
    x = torch.tensor(tokens[:T]).view(1, T)
    y = torch.tensor(tokens[1:]).view(T)
    with torch.no_grad():
        want = F.cross_entropy(model(x).logits.view(T, V), y).item()
    got = steps[0]["loss"]
    print("first-step loss: ampd %.7f, transformers %.7f" % (got, want))
    if abs(got - want) > 1e-5:
        failures.append("first-step loss %.7f != PyTorch's %.7f" % (got, want))
    if not steps[-1]["loss"] < got:
        failures.append("the loss did not fall while fine-tuning: %s" % [s["loss"] for s in steps])

    # 2. ampd's export, into transformers from the config it carries.
    export = os.path.join(work, "export.safetensors")
    with safe_open(export, "pt") as f:
        meta = f.metadata()
    if meta.get("format") != "pt":
        failures.append("export metadata format is %r" % meta.get("format"))
    cfg = json.loads(meta["config"])
    hf_dir = os.path.join(work, "hf")
    os.makedirs(hf_dir)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    os.link(export, os.path.join(hf_dir, "model.safetensors"))
    loaded, info = GPT2LMHeadModel.from_pretrained(hf_dir, output_loading_info=True)
    loaded.eval()
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        if info.get(kind):
            failures.append("%s loading the export: %s" % (kind, info[kind]))
    batch = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(2))
    out = os.path.join(work, "logits.safetensors")
    subprocess.run([gpt_logits, export, str(V), str(T), str(L), str(H), str(C), "2",
                    ",".join(str(t) for t in batch.view(-1).tolist()), out], check=True)
    ampd = load_file(out)["logits"]
    with torch.no_grad():
        ref = loaded(batch).logits.reshape(2 * T, V)
    diff = (ampd - ref).abs().max().item()
    print("export logits: max |ampd - transformers| = %.3g" % diff)
    if diff > 1e-5:
        failures.append("export logits differ by %.3g" % diff)
    # The export really is the fine-tuned model, not the file it started from.
    if torch.equal(load_file(export)["h.0.mlp.c_fc.weight"],
                   sd["transformer.h.0.mlp.c_fc.weight"]):
        failures.append("the export holds the initial weights")
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
