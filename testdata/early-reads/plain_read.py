# One read, at the start: nothing to gain by starting it early.
price = lookup(key="book")
result = price * inputs["quantity"]
