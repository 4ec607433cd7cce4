__spine_prepare('lookup(key="book")', 'lookup(key="pen")')
cheapest = prices.list()[0]
__spine_prepare('lookup(key=cheapest)')
save(key=cheapest, price=lookup(key=cheapest))
total = lookup(key='book') + lookup(key='pen')
save(key='total', price=total)
