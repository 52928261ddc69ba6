"""Paper 003 (Takakura & Suzuki, ICML 2023): transformers for shift-equivariant maps of infinite sequences.

Public API (see the chapter book/seq2seq):

* smoothness and rates: `shift`, `psi`, `frequency_block`, `gamma`, `a_dagger`, `blocks_below`,
  `block_frequencies`, `G_count`, `important_coords`, `unit_ball_coeffs`, `trig_eval`,
  `estimation_rate`; codes: `codes`, `coherence`, `lemma_c3_dim`;
* constructions: `build_extractor` (Thm 4.2, App. E), `build_approximator` (Thm 4.2 with an explicit
  ReLU FNN), `build_selector` (Thm 4.5, App. F), `attention_error_bound`, `chi_for`, `pe_angle`;
* the paper's definition run on paper-form weights: `paper_forward`, and ground truths
  `extract_reference`, `selection_reference`, `importance_values`, and the static baselines of a
  selection target `static_baselines`;
* the paper's size formulas (`formulas`, each a `tfbook.claims.paper_formula`): `eq7_width`, `eq7_growth`
  (Lemma D.1, Eq. (7)), `app_e_embedding_width`, `app_e_heads`, `app_e_chi` (App. E);
* Section 6: `greedy_mask`, `global_greedy_mask`, `jaccard`, `make_motif_dataset`, `TinyViT`; with controls
  (`tfbook.seq2seq.masking_controls`): `masking_study` (one seed of the experiment), `masking_studies`
  (several seeds trained together), `random_jaccard`.
"""
import torch

from tfbook.seq2seq import formulas
from tfbook.seq2seq.masking import (TinyViT, global_greedy_mask, greedy_mask, jaccard, make_motif_dataset,
                                    train_classifier)
from tfbook.seq2seq.masking_controls import masking_studies, masking_study, random_jaccard
from tfbook.seq2seq.ffn import trig_network
from tfbook.seq2seq.models import (PaperSizes, Seq2SeqTransformer, attention_error_bound, build_approximator,
                                   build_extractor, build_selector, chi_for, pe_angle)
from tfbook.seq2seq.reference import (extract_reference, importance_values, paper_forward, selection_reference,
                                      static_baselines)
from tfbook.seq2seq.smoothness import (G_count, a_dagger, block_frequencies, blocks_below, codes, coherence,
                                       estimation_rate, frequency_block, gamma, important_coords, lemma_c3_dim,
                                       psi, shift, trig_eval, unit_ball_coeffs)

__all__ = ["G_count", "PaperSizes", "Seq2SeqTransformer", "TinyViT", "a_dagger", "attention_error_bound",
           "block_frequencies", "blocks_below", "build_approximator", "build_extractor", "build_selector",
           "chi_for", "codes", "coherence", "estimation_rate", "extract_reference", "frequency_block", "gamma",
           "global_greedy_mask", "greedy_mask", "important_coords", "importance_values", "jaccard", "lemma_c3_dim",
           "make_motif_dataset", "masking_studies", "masking_study", "paper_forward", "pe_angle", "psi", "random_jaccard",
           "selection_reference", "shift", "static_baselines", "train_classifier", "trig_eval", "trig_network", "unit_ball_coeffs"]


def _bench_extractor(device: torch.device):
    model = build_extractor([(0, -300), (0, 0), (1, 150), (1, 299)], 2, 300).to_device(device)
    X = torch.rand(2, 2, 2 * 601, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).to(device)
    return model, X


def _bench_selector(device: torch.device):
    V, N = 8, 51 * 3
    model = build_selector({(0, 0): 1.0, (1, 1): 0.25}, [[1], [1], [1], [1]], 2, V, gap=1.0 / (4 * N)).to_device(device)
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(8, 2, N, dtype=torch.float64, generator=gen)
    # importance values (X[0, i] + X[1, i+1]/4) at least 1/(4N) apart in every window, as Theorem 4.5
    # assumes and the run checks: channel 0 a permuted grid of step 1/(N - 1), channel 1 constant
    X[:, 0] = torch.stack([torch.randperm(N, generator=gen) for _ in range(8)]).double() / (N - 1)
    X[:, 1] = 0.5
    return model, X.to(device)


def bench_cases() -> dict[str, dict]:
    """The chapter's benchmarked constructions (read by `tfbook.build.bench`)."""
    return {"seq2seq.extractor(U=300)": {"build": _bench_extractor, "forward": lambda s: s[0](s[1]),
                                         "units": "tokens", "count": 2 * 2 * 601},
            "seq2seq.selector(V=8, r=4)": {"build": _bench_selector, "forward": lambda s: s[0](s[1]),
                                           "units": "tokens", "count": 8 * 153}}
