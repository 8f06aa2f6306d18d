"""The page's layout as a browser measures it: every element that sticks out of its card, every plot whose
marker is out of view (used by the slow browser tests)."""

#: [problems]: a card whose content is wider than the card (scrollWidth > clientWidth), an element whose box
#: passes its card's edge with no scrolling box between them, a plot whose marker (``focus-*``) is outside its
#: visible box, a page wider than the window
LAYOUT_JS = r"""(function(){var out=[], W=document.documentElement.clientWidth;
function name(e){return e.tagName.toLowerCase()+(e.id?'#'+e.id:'')+(e.getAttribute('class')?'.'+String(e.getAttribute('class')).split(' ')[0]:'');}
function scrolls(e, card){for(var p=e.parentElement; p && p!==card; p=p.parentElement){var o=getComputedStyle(p).overflowX;
  if(o==='auto'||o==='scroll'||o==='hidden') return true;} return false;}
if(document.documentElement.scrollWidth>W+1) out.push('page '+document.documentElement.scrollWidth+' > '+W);
document.querySelectorAll('section, .card').forEach(function(card){var cr=card.getBoundingClientRect();
  if(card.scrollWidth>card.clientWidth+1) out.push(name(card)+': content '+card.scrollWidth+' px in '+card.clientWidth);
  card.querySelectorAll('*').forEach(function(e){if(scrolls(e, card)) return; var r=e.getBoundingClientRect();
    if(r.width===0||r.height===0) return;
    if(r.right>cr.right+1||r.left<cr.left-1) out.push(name(e)+' in '+name(card)+': '+Math.round(r.left-cr.left)+'..'+Math.round(r.right-cr.left)+' of '+Math.round(cr.width));
    var o=getComputedStyle(e).overflowX;
    if(o==='visible' && e.clientWidth>0 && e.scrollWidth>e.clientWidth+1 && !(e instanceof SVGElement)) out.push(name(e)+' in '+name(card)+': content '+e.scrollWidth+' px in '+e.clientWidth);});});
document.querySelectorAll('.plotbox').forEach(function(box){var m=box.querySelector('[id^="focus-"]'); if(!m) return;
  var r=m.getBoundingClientRect(), b=box.getBoundingClientRect();
  if(r.left<b.left-1||r.right>b.right+1) out.push('marker '+m.id+' out of view: '+Math.round(r.left-b.left)+' of '+Math.round(b.width));});
return out.slice(0, 25);})()"""
