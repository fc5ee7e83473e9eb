#!/usr/bin/env python3
"""The PyTorch peer of the GPU check (scripts/gpu-check.sh, docs/performance.md).

Loads the Hugging Face snapshot genmodel -hf writes (the same random weights as the
GGUF embed-stack serves) with transformers, and on the same GPU:

- vectors: embeds random token ids of 16, 512, 8192 and 32768 tokens (closed with
  <|endoftext|>, as embed-stack closes every input) in float32, last-token pooled and
  L2-normalised, and compares them with embed-stack's for the same ids (a server
  started with --token-ids native): a second reference, independent of llama.cpp;
- speed: tokens/s in bfloat16 for 32 x 512, 1 x 8192 and 1 x 32768, and the p50 of a
  single 16-token query, timed with CUDA synchronisation.

Writes peer.md and peer.json to --out. Needs torch and transformers only.
"""
import argparse
import json
import random
import statistics
import time
import urllib.request

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoModel

EOS = 151643
LENGTHS = [16, 512, 8192, 32768]
SHAPES = [(32, 512), (1, 8192), (1, 32768)]


def ids(seed, n, vocab):
    rng = random.Random(seed)
    return [rng.randrange(0, EOS) for _ in range(n - 1)] + [EOS]


def last_token(model, batch):
    # The memory-efficient kernel takes float32 and a mask; the math one, which
    # PyTorch picked for float32 otherwise, wrote 16 x 32768 x 32768 float32 scores
    # (64 GiB) for the 32768-token reference on an H200 and ran out of memory.
    with torch.inference_mode(), sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        out = model(input_ids=torch.tensor(batch, device="cuda")).last_hidden_state[:, -1, :]
    return torch.nn.functional.normalize(out.float(), dim=-1)


def server_vector(url, seq):
    # The server appends <|endoftext|> itself: send the ids without it.
    body = json.dumps({"model": "m", "input": [seq[:-1]], "encoding_format": "float"}).encode()
    req = urllib.request.Request(url + "/embeddings", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return torch.tensor(json.load(r)["data"][0]["embedding"], device="cuda")


def timed(fn, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "agreement": [], "speed": []}

    f32 = AutoModel.from_pretrained(a.hf, dtype=torch.float32, attn_implementation="sdpa").cuda().eval()
    vocab = f32.config.vocab_size
    for n in LENGTHS:
        seq = ids(n, n, vocab)
        try:
            ref = last_token(f32, [seq])[0]
        except torch.OutOfMemoryError as e:
            # Recorded, not fatal: the speed half still runs.
            report["agreement"].append({"tokens": n, "error": str(e).split(".")[0]})
            print(f"{n:6d} tokens: no float32 reference: {report['agreement'][-1]['error']}", flush=True)
            torch.cuda.empty_cache()
            continue
        got = server_vector(a.url, seq)
        report["agreement"].append({"tokens": n, "cosine": float(torch.dot(ref, got))})
        print(f"{n:6d} tokens: cosine(embed-stack, torch f32) = {report['agreement'][-1]['cosine']:.7f}", flush=True)
        write(a.out, report)
    del f32
    torch.cuda.empty_cache()

    bf16 = AutoModel.from_pretrained(a.hf, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    for b, n in SHAPES:
        batch = [ids(1000 + i, n, vocab) for i in range(b)]
        last_token(bf16, batch)  # warm-up
        times = timed(lambda: last_token(bf16, batch), 3)
        tps = b * n / statistics.median(times)
        report["speed"].append({"shape": f"{b}x{n}", "seconds_p50": statistics.median(times), "tokens_per_s": tps})
        print(f"{b}x{n}: {tps:,.0f} tokens/s ({statistics.median(times) * 1000:.1f} ms)", flush=True)
        write(a.out, report)
    q = [ids(7, 16, vocab)]
    last_token(bf16, q)
    times = timed(lambda: last_token(bf16, q), 50)
    report["speed"].append({"shape": "query 1x16", "seconds_p50": statistics.median(times)})
    print(f"query of 16 tokens: p50 {statistics.median(times) * 1000:.2f} ms (model only, no HTTP)", flush=True)
    write(a.out, report)


def write(out, report):
    """Writes peer.json and peer.md with what is measured so far, so that a run cut
    short at its time limit still leaves its tables."""
    with open(f"{out}/peer.json", "w") as f:
        json.dump(report, f, indent=2)
    with open(f"{out}/peer.md", "w") as f:
        f.write(f"PyTorch peer on {report['device']} (torch {report['torch']}, transformers, sdpa)\n\n")
        f.write("| tokens | cosine(embed-stack, torch f32) |\n|---|---|\n")
        for r in report["agreement"]:
            f.write(f"| {r['tokens']} | {r['cosine']:.7f} |\n" if "cosine" in r else f"| {r['tokens']} | not measured: {r['error']} |\n")
        f.write("\n| shape (bf16) | p50 | tokens/s |\n|---|---|---|\n")
        for r in report["speed"]:
            tps = f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else ""
            f.write(f"| {r['shape']} | {r['seconds_p50'] * 1000:.2f} ms | {tps} |\n")


if __name__ == "__main__":
    main()
