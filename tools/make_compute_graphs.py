"""Write the shipped computation graphs of the Pollux (and Zeus) applications.

    PYTHONPATH=. python tools/make_compute_graphs.py [--out workbench/data/compute/graphs]

The graphs are computed analytically from the published architectures, layer by layer (no
deep-learning framework is needed): FP32 tensors, FLOPs per sample (a multiply-add counts
2), activation bytes read + written per sample, parameter bytes. Each app's input size is
the one its data set gives:

============  ======================================  =========================================
graph         architecture                            input per sample
============  ======================================  =========================================
cifar10       ResNet-18, CIFAR variant (3x3 stem,      3x32x32 image
              no max-pool), 10 classes
imagenet      ResNet-50 v1.5, 1000 classes            3x224x224 image
bert          BERT-base uncased (12 x 768, 12 heads,  384 tokens (SQuAD max_seq_length),
              FFN 3072) + span head                   Adam(W) optimizer
deepspeech2   DeepSpeech2 (deepspeech.pytorch):        161 x T spectrogram, T = 350 frames
              2 conv (41x11, 21x11, 32 ch), 5 biLSTM   (3.5 s at 10 ms, CMU ARCTIC-length
              of 1024, FC to 29 characters             utterances of the Pollux artifact)
yolov3        YOLOv3 (Darknet-53 + 3 detection        3x416x416 image
              heads, 20 VOC classes)
ncf           NeuMF (GMF 32 + MLP 256-128-64-32),      one (user, item) pair
              MovieLens-1M (6040 users, 3706 items)
deepspeech2-librispeech  as deepspeech2               T = 1230 frames (LibriSpeech mean
                                                       12.3 s), for the Zeus traces
bert-squad128 as bert                                  128 tokens, for the Zeus trace
============  ======================================  =========================================

Assumptions that matter for the prediction, and are not measured: the DeepSpeech2 frame
counts (the artifact does not record utterance lengths); the Zeus BERT/SQuAD sequence length
(the trace does not record it: at 384 tokens its P100 step times would need 1.1x the P100's
FP32 peak, at 128 tokens every device runs at 30-37 % of peak, as ResNet-50 does); that
the Pollux and Zeus runs trained in FP32, and that framework kernels fuse nothing (one
kernel per layer and, for the LSTMs, two per time step and direction).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.compute.graph import Graph, Op, write_graph

F = 4.0  # bytes per FP32 number


class _B:
    """Accumulates ops; ``last`` is the op the next one reads by default."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.last: str | None = None

    def add(self, name: str, kind: str, flops: float, act: float, params: float = 0.0,
            kernels: int = 1, inputs: tuple[str, ...] | None = None,
            dims: tuple[int, ...] = ()) -> str:
        ins = inputs if inputs is not None else ((self.last,) if self.last else ())
        self.ops.append(Op(name, kind, float(flops), float(act), float(params), kernels,
                           tuple(ins), tuple(int(d) for d in dims)))
        self.last = name
        return name

    def conv(self, name: str, cin: int, cout: int, k: int, h: int, w: int, stride: int = 1,
             kh: int | None = None, bn: bool = True, act: bool = True,
             inputs: tuple[str, ...] | None = None) -> tuple[str, int, int]:
        kh = kh or k
        ho, wo = (h + stride - 1) // stride, (w + stride - 1) // stride
        out = cout * ho * wo
        # kernel shape (square only; "same" padding k // 2 gives the ceil(h / stride) above)
        shape = (cin, cout, k, h, stride, k // 2) if (kh == k and h == w) else ()
        o = self.add(name, "conv", 2.0 * out * cin * k * kh, F * (cin * h * w + out),
                     F * cout * cin * k * kh, inputs=inputs, dims=shape)
        if bn:
            o = self.add(name + ".bn", "norm", 5.0 * out, 2 * F * out, 2 * F * cout,
                         dims=(cout, ho * wo))
        if act:
            o = self.add(name + ".relu", "elementwise", out, 2 * F * out, dims=(out,))
        return o, ho, wo

    def linear(self, name: str, tokens: int, fin: int, fout: int, bias: bool = True,
               inputs: tuple[str, ...] | None = None) -> str:
        return self.add(name, "gemm", 2.0 * tokens * fin * fout, F * tokens * (fin + fout),
                        F * (fin * fout + (fout if bias else 0)), inputs=inputs,
                        dims=(tokens, fin, fout))

    def ew(self, name: str, n: float, reads: int = 1, inputs: tuple[str, ...] | None = None
           ) -> str:
        return self.add(name, "elementwise", n, F * n * (reads + 1), inputs=inputs,
                        dims=(int(n),))


def resnet(name: str, blocks: list[int], bottleneck: bool, hw: int, classes: int,
           cifar_stem: bool) -> Graph:
    b = _B()
    if cifar_stem:
        o, h, w = b.conv("stem", 3, 64, 3, hw, hw)
    else:
        o, h, w = b.conv("stem", 3, 64, 7, hw, hw, stride=2)
        b.add("stem.pool", "pool", 9 * 64 * (h // 2) * (w // 2),
              F * 64 * (h * w + (h // 2) * (w // 2)), dims=(64 * h * w,))
        h, w = h // 2, w // 2
    cin = 64
    for s, n in enumerate(blocks):
        width = 64 * 2**s
        cout = width * (4 if bottleneck else 1)
        for i in range(n):
            stride = 2 if (i == 0 and s > 0) else 1
            p = f"l{s + 1}.{i}"
            x = b.last
            assert x is not None
            if bottleneck:
                b.conv(p + ".c1", cin, width, 1, h, w)
                o2, h2, w2 = b.conv(p + ".c2", width, width, 3, h, w, stride)
                o3, _, _ = b.conv(p + ".c3", width, cout, 1, h2, w2, act=False)
            else:
                o2, h2, w2 = b.conv(p + ".c1", cin, width, 3, h, w, stride)
                o3, _, _ = b.conv(p + ".c2", width, cout, 3, h2, w2, act=False)
            skip = x
            if stride != 1 or cin != cout:
                skip, _, _ = b.conv(p + ".down", cin, cout, 1, h, w, stride, act=False,
                                    inputs=(x,))
            n_out = cout * h2 * w2
            b.ew(p + ".add", n_out, reads=2, inputs=(o3, skip))
            b.add(p + ".relu", "elementwise", n_out, 2 * F * n_out, dims=(n_out,))
            cin, h, w = cout, h2, w2
    b.add("pool", "pool", cin * h * w, F * (cin * h * w + cin), dims=(cin * h * w,))
    b.linear("fc", 1, cin, classes)
    b.add("loss", "softmax", 5 * classes, 2 * F * classes, dims=(1, classes))
    return Graph(name, tuple(b.ops), reference_batch=32, optimizer="sgd")


def bert(name: str = "bert", seq: int = 384, layers: int = 12, d: int = 768,
         heads: int = 12, ffn: int = 3072, vocab: int = 30522) -> Graph:
    b = _B()
    t = seq
    b.add("embed", "embedding", 3 * t * d, F * 4 * t * d, F * (vocab + 512 + 2) * d,
          dims=(t, vocab, d))
    b.add("embed.ln", "norm", 5 * t * d, 2 * F * t * d, 2 * F * d, dims=(t, d))
    for i in range(layers):
        p = f"enc{i}"
        x = b.last
        assert x is not None
        b.linear(p + ".qkv", t, d, 3 * d)
        b.ew(p + ".qkv_t", 3 * t * d)  # heads split: transpose + contiguous copy
        b.add(p + ".scores", "gemm", 2.0 * t * t * d, F * (2 * t * d + heads * t * t),
              dims=(heads, t, t, d // heads))
        b.ew(p + ".scale", heads * t * t)
        b.ew(p + ".mask", heads * t * t, reads=2)
        b.add(p + ".softmax", "softmax", 5.0 * heads * t * t, 2 * F * heads * t * t,
              dims=(heads * t, t))
        b.ew(p + ".attn_drop", heads * t * t)
        b.add(p + ".context", "gemm", 2.0 * t * t * d, F * (heads * t * t + 2 * t * d),
              dims=(heads, t, d // heads, t))
        b.ew(p + ".ctx_t", t * d)  # heads merged: transpose + contiguous copy
        b.linear(p + ".proj", t, d, d)
        o = b.ew(p + ".drop1", t * d)
        b.ew(p + ".add1", t * d, reads=2, inputs=(o, x))
        y = b.add(p + ".ln1", "norm", 5 * t * d, 2 * F * t * d, 2 * F * d, dims=(t, d))
        b.linear(p + ".ffn1", t, d, ffn)
        b.ew(p + ".gelu", t * ffn)
        b.linear(p + ".ffn2", t, ffn, d)
        o = b.ew(p + ".drop2", t * d)
        b.ew(p + ".add2", t * d, reads=2, inputs=(o, y))
        b.add(p + ".ln2", "norm", 5 * t * d, 2 * F * t * d, 2 * F * d, dims=(t, d))
    b.linear("span_head", t, d, 2)
    b.add("loss", "softmax", 10 * t, 4 * F * t, dims=(2, t))
    return Graph(name, tuple(b.ops), reference_batch=8, optimizer="adam")


def deepspeech2(name: str, frames: int, hidden: int = 1024, layers: int = 5,
                chars: int = 29) -> Graph:
    b = _B()
    o, h, w = b.conv("conv1", 1, 32, 11, 161, frames, stride=2, kh=41)
    b.add("conv1.hardtanh", "elementwise", 32 * h * w, 2 * F * 32 * h * w)
    o, h, w = b.conv("conv2", 32, 32, 11, h, w, stride=1, kh=21, act=False)
    h = (h + 1) // 2  # conv2 strides 2 in frequency only
    b.add("conv2.hardtanh", "elementwise", 32 * h * w, 2 * F * 32 * h * w)
    t, feat = w, 32 * h
    for i in range(layers):
        gates = 4 * hidden
        flops = 2 * 2.0 * gates * (feat + hidden) * t  # two directions
        act = F * t * (feat + 2 * hidden + 2 * gates)
        b.add(f"lstm{i}", "rnn", flops, act, 2 * F * gates * (feat + hidden + 2),
              kernels=2 * 2 * t)
        b.ew(f"lstm{i}.sum", t * hidden, reads=2)  # the two directions are summed
        b.add(f"lstm{i}.bn", "norm", 5 * t * hidden, 2 * F * t * hidden, 2 * F * hidden)
        feat = hidden
    b.linear("fc", t, hidden, chars, bias=False)
    b.add("ctc", "softmax", 10.0 * t * chars, 4 * F * t * chars)
    return Graph(name, tuple(b.ops), reference_batch=16, optimizer="sgd")


def yolov3(hw: int = 416, classes: int = 20) -> Graph:
    b = _B()
    out_ch = 3 * (5 + classes)
    o, h, w = b.conv("c0", 3, 32, 3, hw, hw)
    c = 32
    routes: dict[int, tuple[str, int, int, int]] = {}
    for s, n in enumerate([1, 2, 8, 8, 4]):
        o, h, w = b.conv(f"d{s}", c, 2 * c, 3, h, w, stride=2)
        c *= 2
        for i in range(n):
            x = o
            b.conv(f"d{s}.{i}.a", c, c // 2, 1, h, w)
            o2, _, _ = b.conv(f"d{s}.{i}.b", c // 2, c, 3, h, w)
            o = b.ew(f"d{s}.{i}.add", c * h * w, reads=2, inputs=(o2, x))
        routes[s] = (o, c, h, w)
    x, c, h, w = routes[4]
    up: str | None = None
    up_c = 0
    for k, s in enumerate([4, 3, 2]):
        src, cs, hs, ws = routes[s]
        cin = cs + up_c
        ins = (src,) if up is None else (src, up)
        width = cs // 2
        o, _, _ = b.conv(f"h{k}.0", cin, width, 1, hs, ws, inputs=ins)
        for j in range(1, 5):
            # alternating 3x3 (width -> 2 width) and 1x1 (2 width -> width) convolutions
            odd = j % 2 == 1
            o, _, _ = b.conv(f"h{k}.{j}", width if odd else 2 * width,
                             2 * width if odd else width, 3 if odd else 1, hs, ws)
        branch = o
        o, _, _ = b.conv(f"h{k}.out0", width, width * 2, 3, hs, ws)
        b.conv(f"h{k}.det", width * 2, out_ch, 1, hs, ws, bn=False, act=False)
        b.add(f"h{k}.yolo", "elementwise", 10.0 * out_ch * hs * ws, 2 * F * out_ch * hs * ws,
              dims=(out_ch * hs * ws,))
        if k < 2:
            u, _, _ = b.conv(f"h{k}.route", width, width // 2, 1, hs, ws, inputs=(branch,))
            up = b.add(f"h{k}.up", "elementwise", (width // 2) * hs * ws * 4,
                       F * (width // 2) * hs * ws * 5, dims=((width // 2) * hs * ws * 4,))
            up_c = width // 2
    return Graph("yolov3", tuple(b.ops), reference_batch=8, optimizer="sgd")


def ncf(users: int = 6040, items: int = 3706, factor: int = 32, layers: int = 3) -> Graph:
    b = _B()
    mlp_emb = factor * 2 ** (layers - 1)
    g = b.add("gmf.embed", "embedding", 0, F * 2 * factor * 2, F * (users + items) * factor,
              inputs=(), dims=(2, users + items, factor))
    gm = b.ew("gmf.mul", factor, reads=2, inputs=(g,))
    m = b.add("mlp.embed", "embedding", 0, F * 2 * mlp_emb * 2, F * (users + items) * mlp_emb,
              inputs=(), dims=(2, users + items, mlp_emb))
    fin = 2 * mlp_emb
    for i in range(layers):
        fout = fin // 2
        m = b.linear(f"mlp{i}", 1, fin, fout, inputs=(m,))
        m = b.ew(f"mlp{i}.relu", fout)
        fin = fout
    b.linear("predict", 1, fin + factor, 1, inputs=(gm, m))
    b.add("loss", "elementwise", 10, F * 4, dims=(1,))
    return Graph("ncf", tuple(b.ops), reference_batch=256, optimizer="adam")


DESCRIPTIONS = {
    "cifar10": "ResNet-18 (CIFAR variant), 3x32x32, 10 classes, SGD momentum",
    "imagenet": "ResNet-50, 3x224x224, 1000 classes, SGD momentum",
    "bert": "BERT-base uncased, 384 tokens (SQuAD), span head, AdamW",
    "bert-squad128": "BERT-base as 'bert', 128 tokens (the Zeus SQuAD trace; see module doc)",
    "deepspeech2": "DeepSpeech2, 2 conv + 5 biLSTM(1024), 350 frames (3.5 s), SGD",
    "deepspeech2-librispeech": "DeepSpeech2 as 'deepspeech2', 1230 frames (LibriSpeech 12.3 s)",
    "yolov3": "YOLOv3 (Darknet-53), 3x416x416, 20 VOC classes, SGD momentum",
    "ncf": "NeuMF, MovieLens-1M, GMF 32 + MLP 256-128-64-32, Adam",
}


def build_all() -> list[Graph]:
    """Every shipped graph, with its description."""
    from dataclasses import replace

    gs = [
        resnet("cifar10", [2, 2, 2, 2], False, 32, 10, cifar_stem=True),
        resnet("imagenet", [3, 4, 6, 3], True, 224, 1000, cifar_stem=False),
        bert(),
        bert("bert-squad128", seq=128),
        deepspeech2("deepspeech2", 350),
        deepspeech2("deepspeech2-librispeech", 1230),
        yolov3(),
        ncf(),
    ]
    # ``meta["app"]``: the application a graph belongs to (two DeepSpeech2 input lengths).
    return [replace(g, description=DESCRIPTIONS[g.name],
                    meta={"app": g.name.split("-")[0]}) for g in gs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path,
                    default=Path(__file__).resolve().parent.parent / "workbench" / "data"
                    / "compute" / "graphs")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for g in build_all():
        write_graph(g, args.out / f"{g.name}.json")
        t = g.totals(1)
        print(f"{g.name:24s} {len(g.ops):4d} ops  {t['flops'] / 1e9:8.3f} GFLOP/sample fwd  "
              f"{g.param_bytes / 4e6:8.2f} M params")


if __name__ == "__main__":
    main()
