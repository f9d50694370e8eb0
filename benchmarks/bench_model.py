"""asv: the cost-model sweep (16 scales x 30 sizes x 5 algorithms) must stay well under a second."""
import numpy as np

from harness.model import alphabeta as ab
from harness.model import nccl_tuning
from harness.model.profile import load_profile


class ModelSweep:
    version = 1
    timeout = 60

    def setup(self):
        self.profile = load_profile("dgx-a100-roce")
        self.links = ab.Links.from_profile(self.profile)
        self.scales = 2.0 ** np.arange(1, 17)  # 2 .. 65536 ranks: 16 scales
        self.sizes = 2.0 ** np.arange(3, 33)  # 8 B .. 4 GiB: 30 sizes
        self.algos = tuple(ab.ALLREDUCE_MODELS)  # 5 algorithms

    def time_alphabeta_sweep(self):
        ab.sweep(self.scales, self.sizes, self.links, self.algos)

    def time_nccl_choose_sweep(self):
        nodes = np.ceil(self.scales / np.minimum(self.scales, self.profile.gpus_per_node))[:, None]
        nccl_tuning.choose(self.scales[:, None], nodes, self.sizes[None, :], self.profile.nccl)
