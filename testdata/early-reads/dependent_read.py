# The second read's argument depends on the first read's answer: it cannot
# start before the first has returned.
first = lookup(key="book")
second = lookup(key="pen" if first > 10 else "book")
result = first + second
