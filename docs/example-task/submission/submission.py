def scale_add(x, y):
    return x + x + y
