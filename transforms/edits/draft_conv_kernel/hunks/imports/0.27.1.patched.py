from vllm.triton_utils import tl, triton
from vllm.utils.torch_utils import direct_register_custom_op
