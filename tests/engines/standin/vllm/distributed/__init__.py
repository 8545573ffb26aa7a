"""Mirrors vllm/distributed/parallel_state.py (0c175ae9): the rank getters a loader calls. vLLM
sets them up in init_distributed_environment; the stand-in's tests set them with _set_ranks."""
import types

_tp = types.SimpleNamespace(world_size=1, rank_in_group=0)
_pp = types.SimpleNamespace(world_size=1, rank_in_group=0, is_first_rank=True, is_last_rank=True)


def _set_ranks(tp_size, tp_rank, pp_size=1, pp_rank=0):
    _tp.world_size, _tp.rank_in_group = tp_size, tp_rank
    _pp.world_size, _pp.rank_in_group = pp_size, pp_rank
    _pp.is_first_rank, _pp.is_last_rank = pp_rank == 0, pp_rank == pp_size - 1


def get_tensor_model_parallel_world_size():
    return _tp.world_size


def get_tensor_model_parallel_rank():
    return _tp.rank_in_group


def get_pp_group():
    return _pp
