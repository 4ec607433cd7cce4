# save is not allowed to read early: it stays where it is, while the reads
# around it start at once.
cheapest = prices.list()[0]
save(key=cheapest, price=lookup(key=cheapest))
total = lookup(key="book") + lookup(key="pen")
save(key="total", price=total)
