"""``python -m spyre_stack``: print the device information (same as `relay device info`)."""

from spyre_stack.info import device_info, format_info

if __name__ == "__main__":
    print(format_info(device_info()))
