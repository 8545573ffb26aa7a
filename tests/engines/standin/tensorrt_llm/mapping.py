"""Mirrors tensorrt_llm/mapping.py Mapping (NVIDIA/TensorRT-LLM b35ac1b6): the fields a loader
reads, tp_rank = rank % tp_size and pp_rank = rank // (tp_size * cp_size) (MpiTopology), the MoE
split's defaults (moe_tp_size = tp_size, moe_ep_size = 1 when neither is given) and pp_layers
(pp_partition's counts when given, else torch.tensor_split)."""


class Mapping:
    def __init__(self, world_size=1, rank=0, gpus_per_node=8, *, cp_size=1, tp_size=1, pp_size=1, moe_tp_size=-1,
                 moe_ep_size=-1, enable_attention_dp=False, pp_partition=None):
        self.world_size, self.rank, self.gpus_per_node = world_size, rank, gpus_per_node
        self.cp_size, self.tp_size, self.pp_size = cp_size, tp_size, pp_size
        if moe_tp_size == -1 and moe_ep_size == -1:
            moe_tp_size, moe_ep_size = tp_size, 1
        elif moe_tp_size == -1:
            moe_tp_size = tp_size // moe_ep_size
        elif moe_ep_size == -1:
            moe_ep_size = tp_size // moe_tp_size
        self.moe_tp_size, self.moe_ep_size = moe_tp_size, moe_ep_size
        self.enable_attention_dp = enable_attention_dp
        self.pp_partition = pp_partition

    @property
    def tp_rank(self):
        return self.rank % self.tp_size

    @property
    def pp_rank(self):
        return self.rank // (self.tp_size * self.cp_size)

    def pp_layers(self, num_layers):
        if self.pp_partition is not None:
            assert len(self.pp_partition) == self.pp_size and sum(self.pp_partition) == num_layers
            start = sum(self.pp_partition[:self.pp_rank])
            return list(range(start, start + self.pp_partition[self.pp_rank]))
        import torch
        return torch.tensor_split(torch.arange(num_layers), self.pp_size)[self.pp_rank].tolist()
