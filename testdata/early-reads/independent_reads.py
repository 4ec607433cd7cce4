# Two reads whose arguments are constants: both start at once.
book = lookup(key="book")
pen = lookup(key="pen")
result = book + pen
