# The file to point TORCH_TEST_DEVICES at. common_device_type runs it with runpy while it is being
# imported, with its own globals (device_type_test_bases, PrivateUse1TestBase, ...) available.
#
#   TORCH_TEST_DEVICES=$(python -c "import spyre_stack.testing as t; print(t.DEVICE_BASE_PATH)")
#   PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1 pytest test_foo.py
#
# It registers the backend, swaps upstream's generic PrivateUse1TestBase (added automatically
# when the backend was registered before common_device_type was imported) for SpyreTestBase, and
# exports TEST_CLASS.
import spyre_stack
from spyre_stack.testing.base import SpyreTestBase, replace_generic_base

spyre_stack.register()

TEST_CLASS = replace_generic_base(SpyreTestBase, globals())
