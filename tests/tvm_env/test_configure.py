"""tvm_env.configure's `quick_stack`: what TVMScript's parser reads of the stack, without the scan of
sys.modules that made registering the CUDA intrinsics take 10-12 s."""

import inspect

from tvm_env.configure import _quick_stack, quick_stack


def _inner(stack, context):
    return stack(context)


def _outer(stack, context):
    return _inner(stack, context)


def _fields(frames):
    return [(f.frame.f_code, f.filename, f.lineno, f.function, f.code_context, f.index) for f in frames]


def test_quick_stack_reads_the_frames_and_lines_inspect_stack_reads():
    for context in (1, 3, 0):
        quick, slow = _outer(quick_stack, context), _outer(inspect.stack, context)
        assert len(quick) == len(slow) > 3
        here = "test_quick_stack_reads_the_frames_and_lines_inspect_stack_reads"
        assert [f.function for f in quick[:3]] == ["_inner", "_outer", here]
        assert _fields(quick) == _fields(slow), context
        if context:
            assert "return stack(context)" in quick[0].code_context[quick[0].index]


def test_the_quick_stack_is_in_place_only_while_registering():
    slow = inspect.stack
    with _quick_stack():
        assert inspect.stack is quick_stack
    assert inspect.stack is slow
