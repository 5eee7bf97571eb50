import sys
import mindspore
from mindspore import nn
from mindspore.nn import Cell
from mindspore.ops import functional as F
#
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/ops/function')
from mindspore.ops import operations as P
from mindspore.ops._primitive_cache import _get_cache_prim

def mean_opt(x, axis=None, keep_dims=False):
    compare_var = axis is None
    if compare_var:
        axis = ()
    _get_cache_prim_var = _get_cache_prim(P.ReduceMean)
    function_var_1 = _get_cache_prim_var(keep_dims)
    function_var = function_var_1(x, axis)
    return function_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.cell import Cell
from mindspore.nn.layer.conv import _Conv

class _ConvOpt(_Conv, Cell):

    def __init__(self):
        Cell.__init__(self)
        for key, value in _Conv.__dict__.items():
            if not key.startswith('__'):
                setattr(_ConvOpt, key, value)
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.normalization import _BatchNorm

class _BatchNormOpt(_BatchNorm, Cell):

    def __init__(self):
        Cell.__init__(self)
        for key, value in _BatchNorm.__dict__.items():
            if not key.startswith('__'):
                setattr(_BatchNormOpt, key, value)
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.pooling import _PoolNd

class _PoolNdOpt(_PoolNd, Cell):

    def __init__(self):
        Cell.__init__(self)
        for key, value in _PoolNd.__dict__.items():
            if not key.startswith('__'):
                setattr(_PoolNdOpt, key, value)
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.conv import Conv2d
from mindspore.train.amp import amp_cast

class Conv2dOpt_16(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.activation import ReLU

class ReLUOpt_8(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_15(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')
from sporeflow.models.resnet import BasicBlock

class BasicBlockOpt_7(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_15(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_8(self.relu)
        self.conv2 = Conv2dOpt_16(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_8(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_14(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_7(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_13(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt_6(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_13(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_7(self.relu)
        self.conv2 = Conv2dOpt_14(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_7(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_12(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_6(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_11(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt_5(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_11(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_6(self.relu)
        self.conv2 = Conv2dOpt_12(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_6(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_10(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_5(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_9(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt_4(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_9(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_5(self.relu)
        self.conv2 = Conv2dOpt_10(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_5(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_8(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_4(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_7(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt_3(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_7(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_4(self.relu)
        self.conv2 = Conv2dOpt_8(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_4(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_6(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_3(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_5(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt_2(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_5(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_3(self.relu)
        self.conv2 = Conv2dOpt_6(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_3(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_4(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_2(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_3(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt_1(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_3(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_2(self.relu)
        self.conv2 = Conv2dOpt_4(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_2(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_2(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt_1(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt_1(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')

class BasicBlockOpt(BasicBlock, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt_1(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt_1(self.relu)
        self.conv2 = Conv2dOpt_2(self.conv2)
        self.bn2 = BatchNorm2dOpt(self.bn2)
        self.relu = ReLUOpt_1(self.relu)
        self.__class__.expansion = obj.__class__.expansion

    def construct(self, x):
        identity = self.down_sample(x) if self.down else x
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        y = self.relu(bn1_var)
        conv2_var = self.conv2(y)
        y = self.bn2(conv2_var)
        add_var = y + identity
        relu_var = self.relu(add_var)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore import ops
from mindspore.nn.layer.basic import Dense

class DenseOpt(Dense, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x_var = amp_cast(x, mindspore.float16)
        x_shape = self.shape_op(x_var)
        x_shape = amp_cast(x_shape, mindspore.float32)
        len_var_1 = len(x_shape)
        compare_var_1 = len_var_1 != 2
        if compare_var_1:
            subscript_var = x_shape[-1]
            usub_var = -1
            tuple_var = (usub_var, subscript_var)
            x_var_4 = amp_cast(x, mindspore.float16)
            tuple_var = amp_cast(tuple_var, mindspore.float16)
            x = self.reshape(x_var_4, tuple_var)
            x = amp_cast(x, mindspore.float32)
        x_var_1 = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        x = self.matmul(x_var_1, weight_var)
        x = amp_cast(x, mindspore.float32)
        if self.has_bias:
            x_var_3 = amp_cast(x, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            x = self.bias_add(x_var_3, bias_var)
            x = amp_cast(x, mindspore.float32)
        if self.activation_flag:
            x = self.activation(x)
        len_var = len(x_shape)
        compare_var = len_var != 2
        if compare_var:
            subscript_var_2 = ops.shape(x)[-1]
            tuple_var_1 = (subscript_var_2,)
            subscript_var_1 = x_shape[:-1]
            out_shape = subscript_var_1 + tuple_var_1
            x_var_2 = amp_cast(x, mindspore.float16)
            out_shape = amp_cast(out_shape, mindspore.float16)
            x = self.reshape(x_var_2, out_shape)
            x = amp_cast(x, mindspore.float32)
        return x

    def extend_repr(self):
        s = f'input_channels={self.in_channels}, output_channels={self.out_channels}'
        if self.has_bias:
            s += f', has_bias={self.has_bias}'
        if self.activation_flag:
            s += f', activation={self.activation}'
        return s
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.nn.layer.pooling import MaxPool2d

class MaxPool2dOpt(MaxPool2d, _PoolNdOpt):

    def __init__(self, obj):
        _PoolNdOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        expand_batch = False
        compare_var = x.ndim == 3
        if compare_var:
            x = x.unsqueeze(0)
            expand_batch = True
        if self.use_pad:
            x = x.unsqueeze(2)
            out = self.max_pool(x)
            isinstance_var = isinstance(out, tuple)
            if isinstance_var:
                subscript_var_1 = out[1]
                squeeze_var_1 = subscript_var_1.squeeze(2)
                subscript_var = out[0]
                squeeze_var = subscript_var.squeeze(2)
                out = (squeeze_var, squeeze_var_1)
            else:
                out = out.squeeze(2)
        else:
            out = self.max_pool(x)
        if expand_batch:
            isinstance_var_1 = isinstance(out, tuple)
            if isinstance_var_1:
                subscript_var_3 = out[1]
                squeeze_var_3 = subscript_var_3.squeeze(0)
                subscript_var_2 = out[0]
                squeeze_var_2 = subscript_var_2.squeeze(0)
                out = (squeeze_var_2, squeeze_var_3)
            else:
                out = out.squeeze(0)
        and_var = self.use_pad and (not self.return_indices)
        if and_var:
            subscript_var_4 = out[0]
            return subscript_var_4
        return out
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class ReLUOpt(ReLU, Cell):

    def __init__(self, obj):
        Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, input):
        input = amp_cast(input, mindspore.float16)
        relu_var = self.relu(input)
        relu_var = amp_cast(relu_var, mindspore.float32)
        return relu_var
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')
from mindspore.ops.primitive import _primexpr
from mindspore.nn.layer.normalization import BatchNorm2d

class BatchNorm2dOpt(BatchNorm2d, _BatchNormOpt):

    def __init__(self, obj):
        _BatchNormOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self._check_input_dim = obj.__class__._check_input_dim

    @staticmethod
    @_primexpr
    def _check_input_dim(shape, cls_name):
        dim = len(shape)
        _check_dim(dim, 4, cls_name)
#
sys.path.insert(0, '/work/main/.venv/lib/python3.11/site-packages/mindspore/nn/layer')

class Conv2dOpt(Conv2d, _ConvOpt):

    def __init__(self, obj):
        _ConvOpt.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)

    def construct(self, x):
        x = amp_cast(x, mindspore.float16)
        weight_var = amp_cast(self.weight, mindspore.float16)
        output = self.conv2d(x, weight_var)
        output = amp_cast(output, mindspore.float32)
        if self.has_bias:
            output_var = amp_cast(output, mindspore.float16)
            bias_var = amp_cast(self.bias, mindspore.float16)
            output = self.bias_add(output_var, bias_var)
            output = amp_cast(output, mindspore.float32)
        return output
#
sys.path.insert(0, '/work/main/src/sporeflow/models')
from sporeflow.models.resnet import ResNet

class ResNetOpt(ResNet, nn.Cell):

    def __init__(self, obj):
        nn.Cell.__init__(self)
        for key, value in obj.__dict__.items():
            setattr(self, key, value)
        self.conv1 = Conv2dOpt(self.conv1)
        self.bn1 = BatchNorm2dOpt(self.bn1)
        self.relu = ReLUOpt(self.relu)
        self.maxpool = MaxPool2dOpt(self.maxpool)
        self.layer1[0] = BasicBlockOpt(self.layer1[0])
        self.layer1[1] = BasicBlockOpt_1(self.layer1[1])
        self.layer2[0] = BasicBlockOpt_2(self.layer2[0])
        self.layer2[1] = BasicBlockOpt_3(self.layer2[1])
        self.layer3[0] = BasicBlockOpt_4(self.layer3[0])
        self.layer3[1] = BasicBlockOpt_5(self.layer3[1])
        self.layer4[0] = BasicBlockOpt_6(self.layer4[0])
        self.layer4[1] = BasicBlockOpt_7(self.layer4[1])
        self.end_point = DenseOpt(self.end_point)

    def construct(self, x):
        conv1_var = self.conv1(x)
        bn1_var = self.bn1(conv1_var)
        relu_var = self.relu(bn1_var)
        x = self.maxpool(relu_var)
        layer1_var = self.layer1(x)
        layer2_var = self.layer2(layer1_var)
        layer3_var = self.layer3(layer2_var)
        x = self.layer4(layer3_var)
        tuple_var = (2, 3)
        mean_var = mean_opt(x, tuple_var)
        end_point_var = self.end_point(mean_var)
        return end_point_var
#