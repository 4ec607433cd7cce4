def price_of(key):
    return lookup(key=key)
if inputs['quantity'] > 2:
    bulk = lookup(key='book')
else:
    bulk = 0
result = bulk + price_of('pen')
